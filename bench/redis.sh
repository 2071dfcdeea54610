#!/usr/bin/env bash
# Throughput of the Redis store's happy path (claim + complete) beside raw
# go-redis running the same two Lua scripts with the same arguments, at the
# same concurrency (1 and 32 goroutines), against a standalone Redis started
# by scripts/services.sh.
#
#   bench/redis.sh                  5 rounds of 2s per measurement
#   ROUNDS=9 BENCHTIME=5s bench/redis.sh
#
# The ratio comes from the interleaved benchmark: every goroutine alternates
# blocks of 20 store and 20 raw operations and times them, so load from
# other processes hits both sides alike; store/raw is the ratio of mean
# latencies, i.e. of throughputs at that concurrency (target >= 0.90). The
# separate store and raw runs (alternating, order flipped every round) give
# absolute ops/s. The report shows medians over the rounds.
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
run() {
	"$bin" -test.run '^$' -test.bench "^BenchmarkClaimComplete/$1\$" -test.benchtime "$benchtime" -test.benchmem |
		grep '^Benchmark' | tee -a "$out"
}
for conc in 1 32; do
	for r in $(seq 1 "$rounds"); do
		log "conc=$conc round $r/$rounds"
		run "conc=$conc/interleaved"
		if [ $((r % 2)) -eq 1 ]; then
			run "conc=$conc/store"
			run "conc=$conc/raw"
		else
			run "conc=$conc/raw"
			run "conc=$conc/store"
		fi
	done
done

echo
echo "medians of $rounds rounds, $benchtime each, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg):"
printf "%-8s | %-28s | %-28s | %s\n" "" "interleaved: store / raw us/op" "separate: store / raw ops/s" "ratio store/raw"
awk '
	{
		split($1, p, "/"); conc = p[2]; kind = p[3]; sub(/-[0-9]+$/, "", kind)
		for (i = 2; i <= NF; i++) {
			if (kind == "interleaved" && $i == "store/raw") add(conc ",ratio", $(i - 1))
			if (kind == "interleaved" && $i == "store-us/op") add(conc ",slat", $(i - 1))
			if (kind == "interleaved" && $i == "raw-us/op") add(conc ",rlat", $(i - 1))
			if (kind != "interleaved" && $i == "ops/s") add(conc "," kind, $(i - 1))
		}
		concs[conc] = 1
	}
	function add(key, v) { n[key]++; vals[key, n[key]] = v }
	function median(key,   m, i, j, t, a) {
		m = n[key]
		if (m == 0) return 0
		for (i = 1; i <= m; i++) a[i] = vals[key, i]
		for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		for (c in concs)
			printf "%-8s | %12.0f / %-13.0f | %12.0f / %-13.0f | %.2fx\n", c,
				median(c ",slat"), median(c ",rlat"), median(c ",store"), median(c ",raw"), median(c ",ratio")
	}' "$out" | sort -t= -k2 -n
