#!/usr/bin/env bash
# HTTP idempotency middleware benchmarks side by side in one run: net/http
# with runtime/idemhttp vs fiber v3 with its idempotency middleware, both on
# an in-memory store, over loopback with the same net/http client. Each
# middleware is measured beside its own framework without it (first calls
# with a new key each, replays of one key). The benchmarks live in their own
# module (bench/httpcompare) so that fiber never enters the main module.
#
# Each benchmark runs alone (its own process, one at a time), in rounds: a
# round runs all six, in the opposite order from the round before, so that
# load drifting on a shared machine hits every side alike. A ratio is taken
# within each round (both sides measured minutes apart at most, seconds
# apart usually) and the median over the rounds is printed beside its goal
# (issue 17), with the median requests/s of each side.
#
#   bench/http.sh [-count N] [-benchtime D]
set -euo pipefail
cd "$(dirname "$0")/httpcompare"
count=6 benchtime=1s
while [ $# -gt 0 ]; do
	case $1 in
	-count) count=$2; shift 2 ;;
	-benchtime) benchtime=$2; shift 2 ;;
	*) echo "usage: $0 [-count N] [-benchtime D]" >&2; exit 2 ;;
	esac
done
out=$(mktemp) bin=$(mktemp)
trap 'rm -f "$out" "$bin"' EXIT
go test -c -o "$bin" .
names=(NetHTTP IdemFirst IdemReplay Fiber FiberIdemFirst FiberIdemReplay)
echo "load before: $(uptime)"
for round in $(seq "$count"); do
	order=("${names[@]}")
	if [ $((round % 2)) -eq 0 ]; then
		order=()
		for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[i]}"); done
	fi
	for name in "${order[@]}"; do
		"$bin" -test.run '^$' -test.bench "^Benchmark$name\$" -test.benchmem -test.benchtime "$benchtime" |
			grep '^Benchmark' | sed "s/^/round $round /"
	done
done | tee "$out"
echo "load after: $(uptime)"
awk '
/^round [0-9]+ Benchmark/ {
	r=$2; name=$3; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	for (i = 1; i <= NF; i++) if ($i == "req/s") { v[name, r] = $(i-1); rounds[r] = 1 }
}
function median(a, m,   i, j, t) {
	for (i = 1; i <= m; i++) for (j = i+1; j <= m; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
	return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
# med: the median requests/s of a side; ratio: the median over the rounds
# of a over b measured in the same round.
function med(k,   a, m, r) { m = 0; for (r in rounds) if ((k, r) in v) a[++m] = v[k, r]; return median(a, m) }
function ratio(a, b,   x, m, r) {
	m = 0; for (r in rounds) if ((a, r) in v && (b, r) in v) x[++m] = v[a, r] / v[b, r]
	return median(x, m)
}
function row(what, got, goal, gs,   verdict) {
	verdict = gs ~ /^\(/ ? "" : (got >= goal ? "met" : "NOT MET")
	printf "  %-44s %5.2f   %-22s %s\n", what, got, gs, verdict
}
END {
	n = 0; for (r in rounds) n++
	printf "\nmedian requests/s over %d rounds (each side alone):\n", n
	split("NetHTTP IdemFirst IdemReplay Fiber FiberIdemFirst FiberIdemReplay", ks, " ")
	for (i = 1; i <= 6; i++) printf "  %-16s %10.0f\n", ks[i], med(ks[i])
	f1 = ratio("IdemFirst", "NetHTTP"); f2 = ratio("IdemReplay", "NetHTTP")
	g1 = ratio("FiberIdemFirst", "Fiber"); g2 = ratio("FiberIdemReplay", "Fiber")
	printf "\nmiddleware / its framework without it, median of per-round ratios (1.00 = free):\n"
	printf "  %-44s %5s   %-22s %s\n", "ratio", "got", "goal (issue 17)", ""
	row("idemhttp first call / net/http", f1, 0.9, ">= 0.90")
	row("idemhttp replay / net/http", f2, 0.9, ">= 0.90")
	row("fiber idempotency first call / fiber", g1, 0, "(reference)")
	row("fiber idempotency replay / fiber", g2, 0, "(reference)")
	row("idemhttp first-call ratio - fiber'"'"'s", f1 - g1, 0, ">= 0 (at least fiber'"'"'s)")
	row("idemhttp replay ratio - fiber'"'"'s", f2 - g2, 0, ">= 0 (at least fiber'"'"'s)")
	printf "\nidemhttp / fiber idempotency, absolute: first call %.2f, replay %.2f\n", ratio("IdemFirst", "FiberIdemFirst"), ratio("IdemReplay", "FiberIdemReplay")
}' "$out"
