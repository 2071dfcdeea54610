#!/usr/bin/env bash
# Long mode of the protocol simulation (runtime/storetest/sim): runs
# TestSimulation again and again with fresh seeds on the chosen stores for
# the given total duration, split evenly between them, and reports the runs,
# the seeds, the store operations and faults explored, and every violation
# with the seed that replays it.
#
#   bench/soak.sh DURATION [-race] [-scale N] [-doors] [STORE...]
#
#   DURATION  total wall time, e.g. 30m, 2h, 90s
#   -race     build the tests with the race detector (slower, fewer runs)
#   -scale N  N times more requests per run (IDEM_SIM_SCALE)
#   -doors    soak TestSimDoors (every entry point: runtime.Do, the idemgen
#             wrapper, idemhttp, idemgrpc, DoTx and group commit on
#             PostgreSQL) instead of TestSimulation, the store's time split
#             evenly between its doors (store operations are not counted
#             there; faults are the renewal faults)
#   STORE     memstore, pgstore, redis-standalone, redis-cluster (default: all)
#
# Servers: IDEM_TEST_POSTGRES_URL, IDEM_TEST_REDIS_URL and
# IDEM_TEST_REDIS_CLUSTER_ADDRS are used when set; otherwise the servers are
# started here on loopback ports (scripts/services.sh) and stopped at the end.
# Logs stay in the directory printed at the end. Exit status 1 when any run
# broke an invariant.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
duration=$1
shift
race=() scale=1 stores=() doors=0
while [ $# -gt 0 ]; do
	case $1 in
	-race) race=(-race) ;;
	-scale) scale=$2; shift ;;
	-doors) doors=1 ;;
	memstore | pgstore | redis-standalone | redis-cluster) stores+=("$1") ;;
	*) usage ;;
	esac
	shift
done
[ ${#stores[@]} -gt 0 ] || stores=(memstore pgstore redis-standalone redis-cluster)

seconds() {
	local d=$1
	case $d in
	*h) echo $((${d%h} * 3600)) ;;
	*m) echo $((${d%m} * 60)) ;;
	*s) echo "${d%s}" ;;
	*) echo "bad duration $d (want e.g. 90s, 30m, 2h)" >&2; exit 2 ;;
	esac
}
total=$(seconds "$duration")
share=$((total / ${#stores[@]}))
[ "$share" -ge 5 ] || { echo "duration too short for ${#stores[@]} stores" >&2; exit 2; }

. scripts/services.sh
need_pg=0 need_redis=0 need_cluster=0
for s in "${stores[@]}"; do
	case $s in
	pgstore) need_pg=1 ;;
	redis-standalone) need_redis=1 ;;
	redis-cluster) need_cluster=1 ;;
	esac
done
if [ $need_pg$need_redis$need_cluster != 000 ]; then
	services_init
	if [ $need_pg = 1 ] && [ -z "${IDEM_TEST_POSTGRES_URL:-}" ]; then start_postgres; fi
	if [ $need_redis = 1 ] && [ -z "${IDEM_TEST_REDIS_URL:-}" ]; then ensure_redis; start_redis; fi
	if [ $need_cluster = 1 ] && [ -z "${IDEM_TEST_REDIS_CLUSTER_ADDRS:-}" ]; then ensure_redis; start_redis_cluster; fi
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/idem-soak.XXXXXX")
log "soak: ${stores[*]}, ${share}s each${race:+ (race)}, scale $scale; logs in $logs"
for s in "${stores[@]}"; do
	case $s in
	memstore) pkg=./runtime/memstore/ run='^TestSimulation$' ;;
	pgstore) pkg=./runtime/pgstore/ run='^TestSimulation$' ;;
	redis-standalone) pkg=./runtime/redisstore/ run='^TestSimulation$/^standalone$' ;;
	redis-cluster) pkg=./runtime/redisstore/ run='^TestSimulation$/^cluster$' ;;
	esac
	each=$share
	if [ $doors = 1 ]; then
		# TestSimDoors runs sim.Runs once per door (seven on PostgreSQL:
		# five doors and two in group-commit mode; four elsewhere).
		run=${run/TestSimulation/TestSimDoors}
		n=4
		[ $s = pgstore ] && n=7
		each=$((share / n))
		[ "$each" -ge 1 ] || each=1
	fi
	log "soak: $s for ${share}s"
	IDEM_SIM_DURATION=${each}s IDEM_SIM_SCALE=$scale CI=true \
		go test "${race[@]}" -count=1 -v -timeout $((share + 900))s -run "$run" "$pkg" >"$logs/$s.log" 2>&1 || true
done

# Each run logs a sim-summary line, a faults/outcomes line and, when it
# failed, a "violations by invariant" line.
status=0
for s in "${stores[@]}"; do
	f=$logs/$s.log
	echo
	echo "== $s"
	awk '
	/sim-summary/ {
		runs++
		for (i = 1; i <= NF; i++) {
			split($i, kv, "=")
			if (kv[1] == "seed") seeds = seeds " " kv[2]
			if (kv[1] == "requests") req += kv[2]
			if (kv[1] == "deliveries") del += kv[2]
			if (kv[1] == "store_ops") ops += kv[2]
			if (kv[1] == "faults") flt += kv[2]
			if (kv[1] == "effects") eff += kv[2]
			if (kv[1] == "window") win += kv[2]
			if (kv[1] == "linearizable_checked") lin += kv[2]
			if (kv[1] == "undecided") und += kv[2]
			if (kv[1] == "violations" && kv[2] > 0) bad++
		}
	}
	/: faults map\[/ {
		line = $0
		sub(/.*: faults map\[/, "", line)
		sub(/\]; outcomes.*/, "", line)
		while (match(line, /[^:]+:[0-9]+( |$)/)) {
			item = substr(line, RSTART, RLENGTH)
			line = substr(line, RSTART + RLENGTH)
			n = item; sub(/.*:/, "", n); sub(/ $/, "", n)
			k = item; sub(/:[0-9]+ ?$/, "", k)
			fault[k] += n
		}
	}
	/violations by invariant/ {
		seed = $0; sub(/.* seed /, "", seed); sub(/:.*/, "", seed)
		failing = failing " " seed
		line = $0
		sub(/.*violations by invariant: map\[/, "", line)
		sub(/\].*/, "", line)
		while (match(line, /[^:]+:[0-9]+( |$)/)) {
			item = substr(line, RSTART, RLENGTH)
			line = substr(line, RSTART + RLENGTH)
			n = item; sub(/.*:/, "", n); sub(/ $/, "", n)
			k = item; sub(/:[0-9]+ ?$/, "", k)
			viol[k] += n
		}
	}
	END {
		printf "runs %d (%d with violations); requests %d, deliveries %d, store operations %d, faults injected %d\n", runs, bad, req, del, ops, flt
		printf "downstream effects %d, at-least-once window (no-Query ops) %d; identities checked for linearizability %d (undecided %d)\n", eff, win, lin, und
		print "faults explored:"
		for (k in fault) printf "  %-50s %d\n", k, fault[k]
		if (bad > 0) {
			print "violations by invariant:"
			for (k in viol) printf "  %-50s %d\n", k, viol[k]
			nf = split(failing, fs, " ")
			printf "failing seeds (replay with IDEM_SIM_SEED=<seed>): %d%s\n", nf, (nf <= 20 ? ":" failing : ", first: " fs[1] " " fs[2] " " fs[3])
		}
		n = split(seeds, all, " ")
		print seeds > seedfile
		printf "seeds run: %d (all in %s)%s\n", n, seedfile, (n <= 20 ? ":" seeds : "")
		exit bad > 0
	}' seedfile="$logs/$s.seeds" "$f" || status=1
	if grep -q -- '--- FAIL' "$f" && ! grep -q 'violations by invariant' "$f"; then
		echo "the test failed outside the simulation's invariants; see $f"
		status=1
	fi
done
echo
echo "logs: $logs"
exit $status
