#!/usr/bin/env bash
# Store performance against the floor, side by side in one run, and
# docs/performance.md with its tables and SVG charts (generated, not drawn).
#
#   bench/stores.sh                 COUNT=5 runs of each benchmark
#   COUNT=3 BENCHTIME=1000x bench/stores.sh
#
# Starts PostgreSQL 15 with fsync and synchronous_commit ON (PG_DURABLE=1)
# and a standalone Redis on loopback ports. For each store and scenario
# (first call, replay of one hot key, replays spread over 2,000 keys) at 1, 8
# and 32 callers, idem and the floor run alone in alternated rounds
# (internal/benchcmp.Alternating); the ratio is floor time / idem time per
# operation, i.e. idem's throughput as a fraction of the floor's. shared-*
# rows run both at once (latency under shared load). pgbench runs the claim+complete SQL
# beside the floor SQL too, without the Go client, to separate SQL cost from
# client cost.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

count=${COUNT:-5}
benchtime=${BENCHTIME:-2000x}
out=docs/performance.md
mkdir -p docs/perf

services_init
PG_DURABLE=1 start_postgres
start_redis
work="$SERVICES_DIR/bench"
mkdir -p "$work"

log "building the benchmarks"
go test -c -o "$work/pg.test" ./runtime/pgstore
go test -c -o "$work/redis.test" ./runtime/redisstore
go test -c -o "$work/rt.test" ./runtime

log "PostgreSQL: $count runs"
"$work/pg.test" -test.run '^$' -test.bench '^BenchmarkPerf$' -test.benchtime "$benchtime" -test.count "$count" | tee "$work/pg.txt" | grep '^Bench' >&2
log "Redis: $count runs"
"$work/redis.test" -test.run '^$' -test.bench '^BenchmarkPerf$' -test.benchtime "$benchtime" -test.count "$count" | tee "$work/redis.txt" | grep '^Bench' >&2
log "memory store"
"$work/rt.test" -test.run '^$' -test.bench '^BenchmarkMem' -test.benchmem -test.count "$count" | tee "$work/mem.txt" | grep '^Bench' >&2

log "pgbench on the same SQL"
"$PG_BIN/psql" "$IDEM_TEST_POSTGRES_URL" -q -f queries/schema.sql >/dev/null 2>&1
pgb() { # script clients -> tps
	"$PG_BIN/pgbench" -n -M prepared -c "$2" -j 2 -T 5 -f "bench/sql/$1.sql" "$IDEM_TEST_POSTGRES_URL" 2>/dev/null |
		awk '/^tps/ {printf "%.0f", $3}'
}
"$PG_BIN/psql" "$IDEM_TEST_POSTGRES_URL" -q -f bench/sql/replay-seed.sql >/dev/null
pgbench_rows=""
for what in first replay; do
	for c in 1 8 32; do
		i=$(pgb "$what-idem" "$c"); f=$(pgb "$what-floor" "$c")
		i2=$(pgb "$what-idem" "$c"); f2=$(pgb "$what-floor" "$c")
		pgbench_rows+="| $what | $c | $i, $i2 | $f, $f2 | $(awk -v a="$i" -v b="$i2" -v c="$f" -v d="$f2" 'BEGIN{printf "%.2fx", (a+b)/(c+d)}') |"$'\n'
	done
done

summary="$work/summary.md"
: >"$summary"
go run ./bench/report -title "PostgreSQL" -svg docs/perf/postgres.svg -summary "$summary" \
	-targets 'first/=0.9,first-group-commit/callers=32=1.5,replay=0.8' <"$work/pg.txt" >"$work/pg.md"
go run ./bench/report -title "Redis" -svg docs/perf/redis.svg -summary "$summary" \
	-targets first/=0.9,replay=0.8 <"$work/redis.txt" >"$work/redis.md"

# The memory store's targets: the median time over a direct call, and the
# allocations, of a first call and of a replay through runtime.Do and
# through an idemgen-generated wrapper.
awk -v out="$summary" '
/^BenchmarkMem/ { n=$1; sub(/-[0-9]+$/, "", n); sub(/^BenchmarkMem/, "", n); ns[n, ++c[n]]=$3; al[n]=$7 }
function median(k,   m, i, j, t, a) {
	m = c[k]; for (i = 1; i <= m; i++) a[i] = ns[k, i]
	for (i = 1; i <= m; i++) for (j = i+1; j <= m; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
	return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
function row(k, base, what, us, allocs,   d, ok) {
	if (!(k in c)) { printf "| memory: %s | not run | <= %g µs, <= %d allocs | not met |\n", what, us, allocs >>out; return }
	d = (median(k) - median(base)) / 1000
	ok = (d <= us && al[k] <= allocs) ? "**met**" : "not met"
	printf "| memory: %s | +%.2f µs, %d allocs | <= %g µs, <= %d allocs | %s |\n", what, d, al[k], us, allocs, ok >>out
}
END {
	row("DoFirstCall", "Direct", "first call, runtime.Do", 1, 4)
	row("WrapperFirstCall", "WrapperDirect", "first call, generated wrapper", 1, 4)
	row("DoReplay", "Direct", "replay, runtime.Do", 0.5, 2)
	row("WrapperReplay", "WrapperDirect", "replay, generated wrapper", 0.5, 2)
}' "$work/mem.txt"

log "memory store: CPU profiles of a first call and a replay"
# Where a call's CPU goes, each sample counted once, in this order: JSON
# (encoding/json and the default codec's own path, jsonfast), SHA-256 (the fingerprint), the memory store, allocation
# and GC, the idem runtime, and the rest (the benchmark's loop).
profile_row() { # benchmark label
	"$work/rt.test" -test.run '^$' -test.bench "^$1\$" -test.benchtime 1000000x -test.cpuprofile "$work/$1.prof" >/dev/null
	share() {
		go tool pprof -top -nodecount=100000 -nodefraction=0 ${1:+-focus="$1"} ${2:+-ignore="$2"} "$work/rt.test" "$work/$bench.prof" 2>/dev/null |
			awk '/^Showing nodes accounting for/ {gsub(/,/, ""); v=$6} END {print (v == "" ? "0%" : v)}'
	}
	local bench=$1 gc='mallocgc|gcBgMarkWorker|gcAssist|bgsweep|scanobject|gcDrain'
	local j s m g r json='encoding/json|jsonfast\.'
	j=$(share "$json")
	s=$(share 'sha256' "$json")
	m=$(share 'memstore' "$json|sha256")
	g=$(share "$gc" "$json|sha256|memstore")
	r=$(share 'idemkit/idem/runtime\.' "$json|sha256|memstore|$gc")
	echo "| $2 | $j | $s | $m | $g | $r |"
}
profile_rows="$(profile_row BenchmarkMemDoFirstCall 'first call, runtime.Do')
$(profile_row BenchmarkMemDoReplay 'replay, runtime.Do')"

log "HTTP middleware: $count rounds"
bench/http.sh -count "$count" -summary "$summary" | tee "$work/http.txt" >&2

mem_rows=$(awk '/^BenchmarkMem/ {n=$1; sub(/-[0-9]+$/, "", n); ns[n]=ns[n] " " $3; al[n]=$7} END {for (k in ns) printf "| %s | %s | %s |\n", k, ns[k], al[k]}' "$work/mem.txt" | sort)

{
	cat <<'DOC'
# Performance

Generated by `bench/stores.sh` (do not edit by hand: run it again). Every
figure below comes from one run of that script on the machine described at
the end; absolute numbers move with the machine's load, ratios much less.

## Method

- **The floor** is the least SQL any correct design needs, on the same table
  (`idem_records`, with its indexes): a first call must persist PROCESSING
  before the effect and the outcome after it (an autocommitted `INSERT`, then
  an autocommitted `UPDATE`); a replay needs one `SELECT` by key. On Redis the
  floor of a first call is the same two Lua scripts sent raw with go-redis,
  and of a replay one `HGETALL` of the record.
- **idem** is `runtime.Do` on the store: the Go client, the runtime's own
  work (encoding, fingerprint, lease timer, completion) and its SQL.
- **Throughput rows** (`first`, `first-group-commit`, `replay-*`) run each
  side alone, alternated over four rounds whose order flips every round
  (`internal/benchcmp.Alternating`), so drifting load from elsewhere hits
  both alike and neither side waits in the other's queue. The ratio is floor
  wall time per operation / idem's at that number of concurrent callers:
  idem's throughput as a fraction of the floor's (1.00x = as fast as the
  floor).
- **Shared-load rows** (`shared-*`) run both sides at once
  (`internal/benchcmp.Interleaved`: every caller alternates blocks of 20 idem
  and 20 floor operations). Once the server saturates, both sides wait in
  the same queue, so these rows state latency under a shared load, not
  throughput, and carry no target.
- PostgreSQL 15 runs with `fsync=on` and `synchronous_commit=on`; every
  commit waits for the disk. Redis runs standalone with default persistence.
- Medians over the runs, min and max beside them.

DOC
	echo "## Targets"
	echo
	echo "Each performance target beside what this run measured (a ratio target is met when the median of every row it judges meets it):"
	echo
	echo "| target | measured | goal | |"
	echo "|---|---|---|---|"
	cat "$summary"
	echo
	echo "## PostgreSQL"
	echo
	cat "$work/pg.md"
	echo "![PostgreSQL ratios](perf/postgres.svg)"
	echo
	echo "pgbench on the same SQL (no Go client), transactions/s, two 5 s runs of each side, alternated: a first"
	echo "call's statements (bench/sql/first-idem.sql) beside an INSERT and an UPDATE, and a replay's SELECT"
	echo "(replay-idem.sql) beside the floor's (replay-floor.sql):"
	echo
	echo "| call | clients | idem SQL tps | floor SQL tps | ratio |"
	echo "|---|---|---|---|---|"
	printf "%s" "$pgbench_rows"
	echo
	echo "## Redis"
	echo
	cat "$work/redis.md"
	echo "![Redis ratios](perf/redis.svg)"
	echo
	echo "## Memory store"
	echo
	echo "ns/op of each run, allocations per op (\`go test -bench Mem -benchmem ./runtime\`):"
	echo
	echo "| benchmark | ns/op (each run) | allocs/op |"
	echo "|---|---|---|"
	echo "$mem_rows"
	echo
	echo "Where the CPU of a call goes (\`go tool pprof\` of 1,000,000 calls each, every sample counted once, in the"
	echo "order of the columns; the rest is the benchmark's loop):"
	echo
	echo "| call | JSON (encoding/json, jsonfast) | SHA-256 | memstore | allocation and GC | idem runtime |"
	echo "|---|---|---|---|---|---|"
	echo "$profile_rows"
	echo
	echo "## HTTP middleware"
	echo
	echo "\`bench/http.sh -count $count\` (its method is in docs/http.md, \"Benchmark\"): idemhttp on net/http and fiber v3's"
	echo "idempotency middleware, each beside its framework without it, all six sides in one process in turns:"
	echo
	echo '```'
	sed -n '/^median over/,$p' "$work/http.txt"
	echo '```'
	echo
	echo "## Machine"
	echo
	echo "- $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB"
	echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- $("$PG_BIN/postgres" --version), $(redis-server --version | cut -d' ' -f1-3), $(go version | cut -d' ' -f3)"
	echo "- $(date -u +%Y-%m-%d), \`COUNT=$count BENCHTIME=$benchtime bench/stores.sh\`"
} >"$out"
log "wrote $out and docs/perf/*.svg"
