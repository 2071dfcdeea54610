#!/usr/bin/env bash
# Throughput of the Redis store's happy path (claim + complete) beside raw
# go-redis running the same two Lua scripts with the same arguments, at the
# same concurrency, against a standalone Redis started by scripts/services.sh.
#
#   bench/redis.sh                  5 rounds of 2s per side and concurrency
#   ROUNDS=9 BENCHTIME=5s bench/redis.sh
#
# Store and raw runs alternate (their order flips every round) so that load
# from other processes hits both alike; the report gives the median ops/s
# of each and their ratio store/raw (the target is >= 0.90).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-2s}

services_init
start_redis
bin="$SERVICES_DIR/redisstore.test"
log "building the benchmark"
go test -c -o "$bin" ./runtime/redisstore
out="$SERVICES_DIR/bench.txt"
for conc in 1 32; do
	for r in $(seq 1 "$rounds"); do
		order="store raw"
		[ $((r % 2)) -eq 0 ] && order="raw store"
		for kind in $order; do
			log "conc=$conc round $r/$rounds: $kind"
			"$bin" -test.run '^$' -test.bench "^BenchmarkClaimComplete/conc=$conc/$kind\$" \
				-test.benchtime "$benchtime" -test.benchmem | grep '^Benchmark' | tee -a "$out"
		done
	done
done

echo
echo "median of $rounds rounds, $benchtime each (GOMAXPROCS=$(nproc)):"
awk '
	{
		split($1, p, "/"); conc = p[2]; kind = p[3]; sub(/-[0-9]+$/, "", kind)
		for (i = 2; i <= NF; i++) if ($i == "ops/s") v = $(i - 1)
		n[conc "," kind]++; vals[conc "," kind, n[conc "," kind]] = v; concs[conc] = 1
	}
	function median(key,   m, i, j, t, a) {
		m = n[key]
		for (i = 1; i <= m; i++) a[i] = vals[key, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		printf "%-10s %14s %14s %8s\n", "", "store ops/s", "raw ops/s", "ratio"
		for (c in concs) {
			s = median(c ",store"); r = median(c ",raw")
			printf "%-10s %14.0f %14.0f %7.2fx\n", c, s, r, s / r
		}
	}' "$out" | sort
