#!/usr/bin/env bash
# HTTP idempotency middleware benchmarks side by side in one run: net/http
# with runtime/idemhttp vs fiber v3 with its idempotency middleware, both on
# an in-memory store, over loopback with the same net/http client. Each
# middleware is measured beside its own framework without it (first calls
# with a new key each, replays of one key). The benchmarks live in their own
# module (bench/httpcompare) so that fiber never enters the main module.
#
# Method: one benchmark process (BenchmarkSides) serves all six sides, which
# take turns in blocks of 64 requests (a few milliseconds; the order rotates
# every turn), each side alone while it runs, 4 callers a core. Load from
# other processes drifts over seconds, so it hits every side alike and the
# ratios hold on a shared machine even where the absolute figures do not.
# The process runs -count times (rounds); each ratio is the median over the
# rounds and is printed beside its goal (the performance targets in
# docs/performance.md).
#
#   bench/http.sh [-count N] [-requests N] [-summary FILE]
#     N requests of each side a round; -summary appends the targets' rows
#     (Markdown, as bench/stores.sh's Targets table has them) to FILE
set -euo pipefail
cd "$(dirname "$0")/httpcompare"
count=5 requests=20000 summary=/dev/null
while [ $# -gt 0 ]; do
	case $1 in
	-count) count=$2; shift 2 ;;
	-requests) requests=$2; shift 2 ;;
	-summary) summary=$(realpath "$2"); shift 2 ;;
	*) echo "usage: $0 [-count N] [-requests N] [-summary FILE]" >&2; exit 2 ;;
	esac
done
out=$(mktemp) bin=$(mktemp)
trap 'rm -f "$out" "$bin"' EXIT
go test -c -o "$bin" .
echo "machine: $(nproc) cores, $(uname -sr); load before: $(uptime | sed 's/.*load average: //')"
for _ in $(seq "$count"); do
	"$bin" -test.run '^$' -test.bench '^BenchmarkSides$' -test.benchtime "${requests}x" | grep '^BenchmarkSides'
done | tee "$out"
echo "load after: $(uptime | sed 's/.*load average: //')"
awk -v summary="$summary" '
/^BenchmarkSides/ {
	n++
	for (i = 3; i < NF; i++) if ($(i+1) ~ /req\/s$|\//) { m = $(i+1); v[m, n] = $i; names[m] = 1 }
}
function med(m,   a, i, j, t) {
	for (i = 1; i <= n; i++) a[i] = v[m, i]
	for (i = 1; i <= n; i++) for (j = i+1; j <= n; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function row(what, got, goal, gs,   verdict) {
	verdict = gs ~ /^\(/ ? "" : (got >= goal ? "met" : "NOT MET")
	printf "  %-42s %6.2f   %-26s %s\n", what, got, gs, verdict
	if (verdict != "")
		printf "| HTTP: %s | %.2fx | %s | %s |\n", what, got, gs, verdict == "met" ? "**met**" : "not met" >>summary
}
END {
	printf "\nmedian over %d rounds, each side alone in turns of 64 requests:\n", n
	split("nethttp idem-first idem-replay fiber fiberidem-first fiberidem-replay", ks, " ")
	for (i = 1; i <= 6; i++) printf "  %-18s %8.0f requests/s\n", ks[i], med(ks[i] "-req/s")
	f1 = med("idem-first/nethttp"); f2 = med("idem-replay/nethttp")
	g1 = med("fiberidem-first/fiber"); g2 = med("fiberidem-replay/fiber")
	printf "\nmiddleware / its framework without it (1.00 = free):\n"
	printf "  %-42s %6s   %-26s\n", "ratio", "got", "goal"
	row("idemhttp first call / net/http", f1, 0.9, ">= 0.90")
	row("idemhttp replay / net/http", f2, 0.9, ">= 0.90")
	row("fiber idempotency first call / fiber", g1, 0, "(reference)")
	row("fiber idempotency replay / fiber", g2, 0, "(reference)")
	row("idemhttp first-call ratio / fiber'"'"'s", f1 / g1, 1, ">= 1.00 (fiber'"'"'s or better)")
	row("idemhttp replay ratio / fiber'"'"'s", f2 / g2, 1, ">= 1.00 (fiber'"'"'s or better)")
	printf "\nidemhttp / fiber idempotency, absolute: first call %.2f, replay %.2f\n", med("idem-first-req/s") / med("fiberidem-first-req/s"), med("idem-replay-req/s") / med("fiberidem-replay-req/s")
}' "$out"
