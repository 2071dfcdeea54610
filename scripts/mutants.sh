#!/usr/bin/env bash
# Mutation testing: applies each mutant of scripts/mutants.txt in turn
# (through `go test -overlay`; the work tree is never changed) and runs the
# tests that must kill it. Starts the servers the store mutants' tests need
# (PostgreSQL 15, a standalone Redis, a 3-master Redis Cluster, on loopback
# ports) and stops them at exit. Arguments go to `go run ./internal/mutants`:
#
#   scripts/mutants.sh                          every mutant (long: see docs/reliability.md)
#   scripts/mutants.sh -run '^pg-'              the mutants whose name matches
#   scripts/mutants.sh -report /tmp/report.md   also write the Markdown report
#   scripts/mutants.sh -check                   only check that every mutant applies and builds (no servers)
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
	if [ "$a" = -check ] || [ "$a" = --check ]; then
		exec go run ./internal/mutants "$@"
	fi
done
. scripts/services.sh
services_init
ensure_packages redis-server:redis-server redis-cli:redis-server >"$SERVICES_DIR/packages.log" 2>&1 ||
	{ cat "$SERVICES_DIR/packages.log" >&2; exit 1; }
start_postgres
start_redis
start_redis_cluster
log "running mutants ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
status=0
go run ./internal/mutants "$@" || status=$?
log "done (load $(cut -d' ' -f1-3 /proc/loadavg))"
exit "$status"
