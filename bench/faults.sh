#!/usr/bin/env bash
# The long mode of the network-fault tests (internal/faulttest, run by
# runtime/pgstore and runtime/redisstore): concurrent duplicates through an
# in-process toxiproxy, more keys per fault than CI's 2.
#
#   bench/faults.sh                       10 keys per fault
#   IDEM_FAULT_KEYS=50 bench/faults.sh
#   IDEM_FAULT_VERBOSE=1 bench/faults.sh  every key's client calls, not only failures
#
# It uses the IDEM_TEST_* servers when set, else starts them with
# scripts/services.sh. Extra arguments go to `go test` (e.g. -race).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

if [ -z "${IDEM_TEST_POSTGRES_URL:-}" ] || [ -z "${IDEM_TEST_REDIS_URL:-}" ] || [ -z "${IDEM_TEST_REDIS_CLUSTER_ADDRS:-}" ]; then
	services_init
	start_postgres
	start_redis
	start_redis_cluster
fi
export IDEM_FAULT_KEYS=${IDEM_FAULT_KEYS:-10}
log "network faults: $IDEM_FAULT_KEYS keys per fault"
go test -count=1 -timeout 60m -run '^TestNetworkFaults' -v "$@" ./runtime/pgstore ./runtime/redisstore
