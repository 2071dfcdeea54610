#!/usr/bin/env bash
# The whole test suite: starts the servers the tests need (PostgreSQL 15, a
# standalone Redis and a 3-master Redis Cluster, on loopback ports), checks formatting, vet, staticcheck and generated-code
# drift, runs `go test -race ./...`, and stops what it started.
#
#   scripts/test.sh              everything
#   scripts/test.sh -run Foo     extra flags go to `go test`
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

log "checking gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

log "go vet"
go vet ./...

log "building pinned tools (sqlc, staticcheck)"
tools_bin=$(mktemp -d)
go -C tools build -o "$tools_bin/" tool

log "staticcheck"
"$tools_bin/staticcheck" ./...

log "checking sqlc output for drift"
"$tools_bin/sqlc" diff -f sqlc.yaml || {
	echo "generated code in runtime/pgstore/internal/db is out of date: run go -C tools tool sqlc generate -f ../sqlc.yaml" >&2
	exit 1
}
rm -rf "$tools_bin"

services_init
start_postgres
start_redis
start_redis_cluster

log "go test -race ./..."
go test -race -count=1 "$@" ./...
log "all tests passed"
