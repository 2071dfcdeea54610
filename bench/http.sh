#!/usr/bin/env bash
# HTTP idempotency middleware benchmarks side by side in one run: net/http
# with runtime/idemhttp vs fiber v3 with its idempotency middleware, both on
# an in-memory store, over loopback with the same net/http client. Each
# middleware is measured beside its own framework without it (first calls
# with a new key each, replays of one key). The benchmarks live in their own
# module (bench/httpcompare) so that fiber never enters the main module.
# Prints the median requests/s and the ratios.
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
# Rounds of all six, not six runs of each in turn: on a shared machine the
# load drifts, and interleaving spreads the drift over every benchmark.
for _ in $(seq "$count"); do
	"$bin" -test.run '^$' -test.bench . -test.benchmem -test.benchtime "$benchtime" | grep '^Benchmark'
done | tee "$out"
awk '
/^Benchmark/ {
	name=$1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	for (i = 1; i <= NF; i++) if ($i == "req/s") v[name, ++n[name]] = $(i-1)
}
function median(k,   m, i, j, t, a) {
	m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
	for (i = 1; i <= m; i++) for (j = i+1; j <= m; j++) if (a[j] < a[i]) { t=a[i]; a[i]=a[j]; a[j]=t }
	return m % 2 ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
END {
	split("NetHTTP IdemFirst IdemReplay Fiber FiberIdemFirst FiberIdemReplay", ks, " ")
	printf "\nmedian requests/s over %d rounds:\n", n["NetHTTP"]
	for (i = 1; i <= 6; i++) { med[ks[i]] = median(ks[i]); printf "  %-16s %10.0f\n", ks[i], med[ks[i]] }
	printf "\nmiddleware / its framework without it (1.00 = free):\n"
	printf "  idemhttp first call %.2f, replay %.2f\n", med["IdemFirst"]/med["NetHTTP"], med["IdemReplay"]/med["NetHTTP"]
	printf "  fiber    first call %.2f, replay %.2f\n", med["FiberIdemFirst"]/med["Fiber"], med["FiberIdemReplay"]/med["Fiber"]
	printf "\nidemhttp / fiber idempotency, absolute: first call %.2f, replay %.2f\n", med["IdemFirst"]/med["FiberIdemFirst"], med["IdemReplay"]/med["FiberIdemReplay"]
}' "$out"
