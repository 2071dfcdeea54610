#!/usr/bin/env bash
# The long mode of the process-level crash test (runtime/pgstore/crash_test.go):
# worker processes killed with SIGKILL at every phase boundary of runtime.Do
# on PostgreSQL, then converged by retries and the reconciler; it prints the
# per-phase counts and fails on any double effect or unconverged request.
#
#   bench/crash.sh                                  1000 runs (CI runs 60)
#   IDEM_CRASH_RUNS=5000 IDEM_CRASH_PARALLEL=8 bench/crash.sh
#   IDEM_CRASH_SEED=<seed of a failing run> bench/crash.sh   same schedules
#
# It uses IDEM_TEST_POSTGRES_URL when set, else starts PostgreSQL with
# scripts/services.sh. Extra arguments go to `go test` (e.g. -race).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

if [ -z "${IDEM_TEST_POSTGRES_URL:-}" ]; then
	services_init
	start_postgres
fi
export IDEM_CRASH_RUNS=${IDEM_CRASH_RUNS:-1000}
log "crash test: $IDEM_CRASH_RUNS runs"
go test -count=1 -timeout 60m -run '^TestCrashProcesses$' -v "$@" ./runtime/pgstore
