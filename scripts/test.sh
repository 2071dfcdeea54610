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

# Every binary the suite links (the test binaries, and through
# IDEM_TEST_CHILD_GOFLAGS the ones the tests build: generated code, the
# idemlint and idemgen commands, services of the release tests) is linked
# without DWARF, which only a debugger reads: a -race test binary links in
# about 2.4 s of CPU instead of 3.2 s here. Stack traces and race reports
# are unchanged (they read the symbol table), and no compiled package
# depends on the flag, so the build cache is shared as before.
# Set before the first build (staticcheck's, below).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-ldflags=-w"
export IDEM_TEST_CHILD_GOFLAGS=-ldflags=-w

# What waits on the network or on apt runs beside the CPU-bound checks: the
# Debian packages the tests need, and the build of the pinned staticcheck
# (its own module).
ensure_packages redis-server:redis-server redis-cli:redis-server nvim:neovim >"$SERVICES_DIR/packages.log" 2>&1 &
packages=$!
tools_bin="$SERVICES_DIR/bin"
go -C tools build -o "$tools_bin/" honnef.co/go/tools/cmd/staticcheck >"$SERVICES_DIR/staticcheck-build.log" 2>&1 &
staticcheck_build=$!
# The modules of the analyzers' corpus (analyzer/testdata/mod: gorm, bun,
# ent, Firestore...), which the rules' tests and cmd/idemlint's load: fetched
# now, while the CPU compiles, not when those tests start. A failure here is
# not one: the tests fetch what is missing and say what went wrong.
go -C analyzer/testdata/mod mod download >"$SERVICES_DIR/corpus-download.log" 2>&1 &
corpus_download=$!

# Test runs started in the background (bg_test), by name: their pids and logs.
declare -A bg_pid=()
# On an early exit the build is stopped, the background test runs are
# stopped with the test binaries they started, and apt is let finish (a
# killed dpkg leaves its lock behind); then the services are stopped. Each
# step may fail (the build ended long ago, apt was waited for): under set -e
# a failing command in the trap would make a green run exit 1.
stop_all() {
	kill "$staticcheck_build" "$corpus_download" 2>/dev/null || true
	local name
	for name in "${!bg_pid[@]}"; do
		pkill -P "${bg_pid[$name]}" 2>/dev/null || true
		kill "${bg_pid[$name]}" 2>/dev/null || true
	done
	wait "$packages" 2>/dev/null || true
	services_stop
}
trap stop_all EXIT

# bg_test NAME ARGS... runs `go test -count=1 -vet=off ARGS` in the
# background, its output in $SERVICES_DIR/NAME.log. go vet ./... has already
# run every analyzer go test would (-vet=off saves type-checking each
# package once more).
bg_test() {
	local name=$1
	shift
	log "go test $* (in the background: $name)"
	# shellcheck disable=SC2068
	go test -count=1 -vet=off "$@" >"$SERVICES_DIR/$name.log" 2>&1 &
	bg_pid[$name]=$!
}

# pgstore's -race test binary runs (split_test, below) in four processes at
# once, each on a database of its own (tests that use the public schema
# never meet): the first three run the tests pg_shards names, the last the
# rest. The suite's tests wait on
# leases, servers and child processes one after another, not on the CPU:
# alone on this 2-core machine it took 380 s for 83 s of CPU (go test
# -json, 7 December), its tests summing to 88, 79, 91 and 101 s by these
# shards. In two processes it took 495 s of CI's 640 (on a fresh machine
# beside the rest, 7 December) and ended the run.
pg_shards=(
	'^(TestConformance|TestSimDoors|TestMigrate.*)$'
	'^(TestConformanceGroupCommit|TestNetworkFaults.*|TestCrashProcesses|TestSimulation.*)$'
	'^(TestH36.*|TestR20.*|TestR23.*)$'
)
pg_dbs=(postgres idem_b idem_c idem_d)

# split_test PKG SHARDS [DBS] builds runtime/PKG's -race test binary once and
# runs it in one process per regex of the array named SHARDS, and one more
# for the rest, at once; with DBS (an array name), process i runs on the
# PostgreSQL database DBS[i]. Each process runs from the package's directory
# as go test does, with the stores' 20-minute timeout; split_test prints
# every output and fails when any failed.
split_test() {
	local pkg=$1 status=0 start=$SECONDS i n skip what st db
	local -n shards=$2
	local -a dbs=() pids=()
	[ -n "${3:-}" ] && { local -n dbref=$3; dbs=("${dbref[@]}"); }
	local bin="$SERVICES_DIR/$pkg.test"
	n=${#shards[@]}
	go test -c -race -vet=off -o "$bin" "./runtime/$pkg" || return
	skip=$(IFS='|' && echo "${shards[*]}")
	for i in $(seq 0 "$n"); do
		local flag=(-test.run "${shards[$i]:-}") env=()
		[ "$i" -eq "$n" ] && flag=(-test.skip "$skip")
		[ ${#dbs[@]} -gt 0 ] && env=("IDEM_TEST_POSTGRES_URL=${IDEM_TEST_POSTGRES_URL/\/postgres\?//${dbs[$i]}?}")
		(cd "runtime/$pkg" && exec env "${env[@]}" "$bin" -test.timeout 20m -test.paniconexit0 "${flag[@]}") >"$SERVICES_DIR/$pkg-$i.log" 2>&1 &
		pids+=($!)
	done
	for i in $(seq 0 "$n"); do
		st=0
		wait "${pids[$i]}" || st=$?
		[ "$st" -eq 0 ] || status=$st
		what="the tests ${shards[$i]:-}"
		[ "$i" -eq "$n" ] && what="the other tests"
		db=""
		[ ${#dbs[@]} -gt 0 ] && db=" (database ${dbs[$i]})"
		echo "runtime/$pkg, $what$db: exit $st, $((SECONDS - start)) s after the build began"
		cat "$SERVICES_DIR/$pkg-$i.log"
	done
	[ "$status" -eq 0 ]
}

# redisstore's suite runs in three processes too (split_test) (its tests isolate themselves by key prefix, or run
# servers of their own): alone it took 281 s for tests that mostly wait on
# servers one after another (go test -json, 7 December), and beside the rest
# 511 s, 100 s after every other package had ended. Shards by the tests'
# durations: 102, 106 and 73 s.
rs_shards=(
	'^(TestConformance|TestNetworkFaults.*|TestFailover)$'
	'^(TestReshard.*|TestConformanceResentScripts|TestConformanceCluster|TestClusterFailover)$'
)


# wait_test NAME waits for a background run, prints its output, and exits
# with its status when it failed.
wait_test() {
	local name=$1 status=0
	wait "${bg_pid[$name]}" || status=$?
	unset "bg_pid[$name]"
	log "$name: exit $status"
	cat "$SERVICES_DIR/$name.log"
	[ "$status" -eq 0 ] || exit "$status"
}

log "checking gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# PostgreSQL initializes beside go vet; the stores' suites start right
# after it. They mostly wait on leases and servers, not on the CPU, so they
# run beside everything that follows and the two longest packages do not end
# the run; starting them earlier would compile their -race builds twice on a
# cold cache (vet builds the same ones, in another process).
start_postgres

# go vet -race: the race-instrumented builds that vet compiles are the ones
# the -race suites and staticcheck (below) reuse, so a cold cache compiles
# each package once in that mode. Plain `go vet` compiled every package a
# second time, without the race detector: measured on this 2-core machine
# with an empty GOCACHE, vet plus the -race test builds took 316 + 390 s of
# CPU that way and 328 + 131 s this way. No file here depends on the race
# build tag but cmd/idemlint/race_test.go, which plain vet never saw.
log "go vet -race"
go vet -race ./...
# Then every -race test package once, in one go command, before anything
# that builds them starts. go vet compiles what the tests import (and a
# package with its _test files where an external test imports it), not
# the external test packages nor the tests' main packages. Left to the
# test runs, staticcheck's go list -export -test (in the background) and
# the go test that built the same package compiled it twice at once: a cold
# run compiled runtime's external test package twice, 52 s of CPU each
# (151 s of CPU compiled twice in all, measured with -toolexec). Now the
# tests and staticcheck find them built.
log "compiling the -race test packages (go list -export -test)"
go list -export -test -deps -race ./... >/dev/null
# The store packages get 20 minutes, not go test's 10: on a 2-core machine
# kept at a load of 16 (bench/ciload.sh with other work beside it) the
# pgstore package took 10 minutes and was killed with its tests passing.
# pgstore's suite is the longest of all (6 minutes alone, 8 in CI beside the
# rest) and mostly waits: a full run splits it in four processes
# (split_test). With flags of the caller's (-run Foo) it runs as one go
# test.
if [ $# -eq 0 ]; then
	for db in "${pg_dbs[@]:1}"; do
		"$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U idem "$db"
	done
	log "go test -race ./runtime/pgstore, in four processes (in the background: pgstore)"
	split_test pgstore pg_shards pg_dbs >"$SERVICES_DIR/pgstore.log" 2>&1 &
	bg_pid[pgstore]=$!
else
	bg_test pgstore -race -timeout 20m ./runtime/pgstore "$@"
fi

wait "$packages" || { cat "$SERVICES_DIR/packages.log" >&2; exit 1; }
cat "$SERVICES_DIR/packages.log" >&2
start_redis
start_redis_cluster
if [ $# -eq 0 ]; then
	log "go test -race ./runtime/redisstore, in three processes (in the background: redisstore)"
	split_test redisstore rs_shards >"$SERVICES_DIR/redisstore.log" 2>&1 &
	bg_pid[redisstore]=$!
else
	bg_test redisstore -race -timeout 20m ./runtime/redisstore "$@"
fi

log "building pinned staticcheck"
wait "$staticcheck_build" || { cat "$SERVICES_DIR/staticcheck-build.log" >&2; exit 1; }

# staticcheck loads every package's export data through go list -export;
# with -race in GOFLAGS that is the data go vet -race just compiled. Without
# it, a cold run compiled everything once more: 322 s of CPU against 54 s.
# It runs on one core (on an empty cache 111 s of wall time for 126 s of
# CPU, measured alone) and its answer is needed only at the end, so it runs
# in the background beside the tests instead of holding them up with the
# other core idle but for the stores' suites, which mostly wait.
log "staticcheck (GOFLAGS=-race, to reuse go vet's builds; in the background)"
GOFLAGS="${GOFLAGS:+$GOFLAGS }-race" "$tools_bin/staticcheck" ./... >"$SERVICES_DIR/staticcheck.log" 2>&1 &
bg_pid[staticcheck]=$!

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
# (no test runs; scripts/mutants.sh runs them). In the background, as
# staticcheck: on a cold run it took 66 s of wall time before the test
# batches could start (building its tool and listing the export data, beside
# staticcheck and the stores' suites), for an answer needed only at the end.
# GOFLAGS=-race: its go list -export reads the export data go vet -race
# compiled, as staticcheck does, instead of compiling the mutated packages'
# dependencies once more without it.
log "checking that every mutant of scripts/mutants.txt applies (in the background)"
GOFLAGS="${GOFLAGS:+$GOFLAGS }-race" go run ./internal/mutants -check >"$SERVICES_DIR/mutants-check.log" 2>&1 &
bg_pid[mutants]=$!


# Packages whose code runs on one goroutine, or whose tests mostly wait on
# the go command they start, run once without the race detector: the
# rules' analysistest suites (CPU-bound, they type-check real libraries:
# under -race they took two thirds of CI's time), the analyzers' shared
# helpers and the golangci-lint plugin, idemgen's command, the templates,
# mutants' check and cmd/idemlint's tests, which run the idemlint binary as a
# child process: a -race test binary would check only the test's own client.
# The tests that compile modules of their own with the go command (the
# generator's golden cases, the release and adoption tests) run in the -race
# batch, and their children build with -race too (testenv.ChildGoFlags): they
# then reuse the packages go vet -race compiled instead of compiling pgx,
# go-redis and the runtime once more without it (after go vet -race on an
# empty cache: 350 s of CPU for the three without -race, 130 s with it).
# What runs concurrently keeps -race: the runtime,
# the stores, the adapters, analyzer/facts (shared by parallel passes), and
# the language server: its protocol, diagnostics, cancellation, settings and
# dependency-cache tests run from a -race test binary (and only there: the
# batch without -race skips them), which builds the server it starts with
# -race and fails on any race the server reports.
# Each batch starts its longest packages first (go test starts packages in
# the order named), so that none of them is left to run alone at the end:
# cmd/idemlint's tests (the corpus run compiles the corpus's libraries), the
# end-to-end tests that build modules, the adapters and the model checks.
# The runtime's suite goes first of the -race batch: it mostly waits on
# leases and timers, and started sixth (after the model check) it ended a
# warm whole run, 8 December (the batch's packages took 220 to 296 s each
# at -p 4, the runtime's 260 s, begun some 300 s in).
norace=$(go list ./cmd/idemlint ./analyzer/... ./cmd/idemgen ./templates ./internal/mutants |
	grep -v -x -F "$(go list ./analyzer/facts/...)")
stores=$(go list ./runtime/pgstore ./runtime/redisstore)
# The go commands the tests start (go vet -vettool and the idemlint driver's
# go list -export on modules of their own, in cmd/idemlint and the rules'
# vettool tests) build with -race in both batches (testenv.ChildGoFlags),
# so they read the standard library go vet -race compiled instead of
# compiling it again without the race detector.
export IDEM_TEST_CHILD_RACE=1
# The two batches run side by side: most of the -race batch waits on leases,
# timers and servers (the runtime's suite used 20 s of CPU in 120 s), so it
# runs up to 4 packages at once, and the CPU-bound batch without the race
# detector fills what it leaves.
lsprace='^(TestLSPProtocol|TestLSPDiagnostics|TestLSPExitKillsAnalysis|TestLSPConfig|TestDepCacheEdits)$'
wait "$corpus_download" || cat "$SERVICES_DIR/corpus-download.log" >&2
# Every package gets 20 minutes, as the stores' do. cmd/idemlint's tests
# wait on the child processes they start (the idemlint binary, go vet, go
# list, Neovim), and at a load of 18 on this 2-core machine
# (bench/ciload.sh) the package took over go test's default 10 minutes with
# every test passing; the model check took 6.
# shellcheck disable=SC2086
bg_test norace -timeout 20m -skip "$lsprace" $norace "$@"
bg_test lsprace -race -timeout 20m -run "$lsprace" ./cmd/idemlint "$@"
log "go test -race (everything else that runs concurrently)"
long=$(go list ./runtime ./examples/adopt ./internal/releasetest ./generator ./runtime/idemhttp ./runtime/storetest/model ./analyzer/facts)
# shellcheck disable=SC2046,SC2086
go test -race -count=1 -vet=off -p 4 -timeout 20m "$@" $long $(go list ./... | grep -v -x -F "$norace" | grep -v -x -F "$stores" | grep -v -x -F "$long")
wait_test staticcheck
# The mutants' table (one row each) is printed only when one does not apply.
mutants_status=0
wait "${bg_pid[mutants]}" || mutants_status=$?
unset "bg_pid[mutants]"
log "mutants -check: exit $mutants_status ($(grep -c '| applies |' "$SERVICES_DIR/mutants-check.log" || true) apply)"
[ "$mutants_status" -eq 0 ] || { cat "$SERVICES_DIR/mutants-check.log" >&2; exit "$mutants_status"; }
wait_test norace
wait_test lsprace
wait_test pgstore
wait_test redisstore
log "all tests passed"
