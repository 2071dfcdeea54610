#!/usr/bin/env bash
# The whole test suite: starts the servers the tests need (PostgreSQL 15, a
# standalone Redis and a 3-master Redis Cluster, on loopback ports), checks
# formatting, vet, staticcheck and generated-code drift, runs `go test
# -race ./...` (the stores' suites beside the rest; the packages that run
# on one goroutine, the analyzers' rules among them, without -race), and
# stops what it started.
#
#   scripts/test.sh              everything
#   scripts/test.sh -run Foo     extra flags go to `go test`
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
services_init

# What waits on the network or on apt runs beside the CPU-bound checks: the
# Debian packages the tests need, and the build of the pinned staticcheck
# (its own module).
ensure_packages redis-server:redis-server redis-cli:redis-server nvim:neovim >"$SERVICES_DIR/packages.log" 2>&1 &
packages=$!
tools_bin="$SERVICES_DIR/bin"
go -C tools build -o "$tools_bin/" honnef.co/go/tools/cmd/staticcheck >"$SERVICES_DIR/staticcheck-build.log" 2>&1 &
staticcheck_build=$!
# On an early exit the build is stopped and apt is let finish (a killed
# dpkg leaves its lock behind), then the services are stopped.
# Each step may fail (the build ended long ago, apt was waited for): under
# set -e a failing command in the trap would make a green run exit 1.
# The stores' go test, when it still runs (another suite failed first), is
# stopped with the test binaries it started.
trap 'kill "$staticcheck_build" 2>/dev/null || true; if [ -n "${stores_test:-}" ]; then pkill -P "$stores_test" 2>/dev/null || true; kill "$stores_test" 2>/dev/null || true; fi; wait "$packages" 2>/dev/null || true; services_stop' EXIT

log "checking gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

log "go vet"
go vet ./...

log "building pinned staticcheck"
wait "$staticcheck_build" || { cat "$SERVICES_DIR/staticcheck-build.log" >&2; exit 1; }

log "staticcheck"
"$tools_bin/staticcheck" ./...

log "checking sqlc output for drift"
if scripts/sqlc.sh check; then
	# The code is what scripts/sqlc.sh generated from these very inputs
	# (checksums of inputs and outputs match): no need for the cgo build of
	# sqlc, which takes minutes on a cold machine.
	log "runtime/pgstore/internal/db matches runtime/pgstore/internal/db/sqlc.sum"
else
	log "sqlc.sum does not match: building the pinned sqlc (cgo, slow) to compare"
	go -C tools build -o "$tools_bin/" github.com/sqlc-dev/sqlc/cmd/sqlc
	"$tools_bin/sqlc" diff -f sqlc.yaml || {
		echo "generated code in runtime/pgstore/internal/db is out of date: run scripts/sqlc.sh" >&2
		exit 1
	}
	log "the generated code is up to date, but sqlc.sum is stale: run scripts/sqlc.sh to record it (CI then skips this build)"
fi

# Mutation testing's list (scripts/mutants.txt) must still apply to the code:
# every mutant's text found once, every mutated package type-checking
# (seconds: no test runs; scripts/mutants.sh runs them).
log "checking that every mutant of scripts/mutants.txt applies"
go run ./internal/mutants -check >"$SERVICES_DIR/mutants-check.log" ||
	{ cat "$SERVICES_DIR/mutants-check.log" >&2; exit 1; }

wait "$packages" || { cat "$SERVICES_DIR/packages.log" >&2; exit 1; }
cat "$SERVICES_DIR/packages.log" >&2
start_postgres
start_redis
start_redis_cluster

# Packages whose code runs on one goroutine, or whose tests mostly wait on
# the go command they start, run once without the race detector: the
# rules' analysistest suites (CPU-bound, they type-check real libraries:
# under -race they took two thirds of CI's time), the analyzers' shared
# helpers and the golangci-lint plugin, the generator and its command, the
# templates, and the tests that drive the go command (mutants' check, the
# release and adoption tests). Their builds are the ones go vet already
# compiled, so a cold run compiles them once. What runs concurrently keeps
# -race: the runtime, the stores, the adapters, analyzer/facts (shared by
# parallel passes) and cmd/idemlint (the whole-program driver's workers and
# the language server).
norace=$(go list ./analyzer/... ./generator/... ./cmd/idemgen ./templates ./internal/mutants ./internal/releasetest ./examples/adopt |
	grep -v -x -F "$(go list ./analyzer/facts/...)")
# The stores' suites (PostgreSQL, Redis) mostly wait on leases and servers,
# not on the CPU: they run in a go test of their own beside the rest, which
# would otherwise leave the two slowest packages to the end of the queue.
stores=$(go list ./runtime/pgstore ./runtime/redisstore)
log "go test -race (the stores' suites, beside the rest)"
# shellcheck disable=SC2086
go test -race -count=1 "$@" $stores >"$SERVICES_DIR/stores.log" 2>&1 &
stores_test=$!
log "go test -race (everything else that runs concurrently)"
# shellcheck disable=SC2046
go test -race -count=1 "$@" $(go list ./... | grep -v -x -F "$norace" | grep -v -x -F "$stores")
log "go test (what needs no race detector, see above)"
# shellcheck disable=SC2086
go test -count=1 "$@" $norace
log "waiting for the stores' suites"
stores_ok=0
wait "$stores_test" || stores_ok=$?
cat "$SERVICES_DIR/stores.log"
if [ "$stores_ok" -ne 0 ]; then
	exit "$stores_ok"
fi
log "all tests passed"
