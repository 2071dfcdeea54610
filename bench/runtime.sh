#!/usr/bin/env bash
# Runtime benchmarks side by side in one run: the effect alone vs runtime.Do
# on the memory store, and a raw INSERT vs runtime.Do on PostgreSQL 15
# (started here on a loopback port), and the request fingerprint's three
# ways (JSON, value-checked, canonical). Prints the ratios.
#
#   bench/runtime.sh [-count N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
count=5
[ "${1:-}" = "-count" ] && count=$2
services_init
start_postgres
out=$(mktemp)
go test -run '^$' -bench . -benchmem -count "$count" ./runtime/ ./runtime/pgstore/ | tee "$out"
awk '
/^Benchmark/ { name=$1; sub(/-[0-9]+$/, "", name); ns[name]+=$3; n[name]++ }
END {
	for (k in ns) avg[k]=ns[k]/n[k]
	printf "\nmean ns/op over the runs:\n"
	for (k in avg) printf "  %-30s %12.0f\n", k, avg[k]
	b = avg["BenchmarkPGBaselineInsert"]
	if (b > 0)
		printf "\nPostgreSQL: Do happy path / one raw INSERT = %.2fx; Do replay / one raw INSERT = %.2fx\n",
			avg["BenchmarkPGDoFirstCall"] / b, avg["BenchmarkPGDoReplay"] / b
	j = avg["BenchmarkEncodeRequest/json"]
	if (j > 0)
		printf "fingerprint: value-checked (omitempty) / JSON = %.2fx; canonical / JSON = %.2fx\n",
			avg["BenchmarkEncodeRequest/omitempty"] / j, avg["BenchmarkEncodeRequest/canonical"] / j
}' "$out"
rm -f "$out"
