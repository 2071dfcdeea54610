#!/usr/bin/env bash
# bench/idemlint.sh: wall time and peak memory of idemlint next to go vet on
# the same packages: this repository, golang.org/x/tools (a mid-size real
# module, fetched into the module cache with go mod download when missing),
# and any module directories given in IDEMLINT_BENCH_DIRS (space-separated).
#
# Each measurement uses a fresh GOCACHE, warmed first with the export data of
# the packages, their tests and dependencies (`go list -export -deps -test`),
# so that compiling is not measured and go vet's own result cache cannot
# answer (every tool runs exactly once per cache).
#
# Columns: wall seconds and peak resident memory (GNU time's maximum RSS:
# the largest process of the tree, so for go vet the largest of its
# per-package vet processes) of go vet (default analyzers), idemlint run
# directly (the whole program in one process), idemlint with a
# configuration flag set, and go vet -vettool=idemlint (per-package units);
# then idemlint/go vet ratios of time and memory.
#
# Usage: bench/idemlint.sh [reps]   (default 1; TOOLS_PKGS overrides ./go/...)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-1}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

bin=$work/idemlint
(cd "$root" && GOCACHE=$(go env GOCACHE) go build -o "$bin" ./cmd/idemlint)

timer=/usr/bin/time
if ! "$timer" -f %M true >/dev/null 2>&1; then
	echo "bench/idemlint.sh needs GNU time at /usr/bin/time (apt-get install time)" >&2
	exit 1
fi

# measure1 DIR CMD...: "seconds MB" of CMD in DIR (its exit status is
# ignored: findings make the checkers exit non-zero).
measure1() {
	local dir=$1
	shift
	local out
	out=$(cd "$dir" && { "$timer" -f '%e %M' "$@" >/dev/null 2>"$work/err" || true; } && tail -1 "$work/err")
	awk -v e="${out% *}" -v m="${out#* }" 'BEGIN { printf "%.2f %.0f", e, m / 1024 }'
}

row() { printf '%-26s %15s %15s %15s %15s %7s %7s\n' "$@"; }

measure() {
	local label=$1 dir=$2
	shift 2
	local n
	n=$(cd "$dir" && go list "$@" 2>/dev/null | wc -l)
	for rep in $(seq "$reps"); do
		export GOCACHE=$work/cache-$label-$rep
		# export data of every package and test variant: what go vet compiles first
		(cd "$dir" && go list -export -deps -test "$@" >/dev/null 2>&1) || true
		local vet lint flag vettool
		vet=$(measure1 "$dir" go vet "$@")
		lint=$(measure1 "$dir" "$bin" "$@")
		flag=$(measure1 "$dir" "$bin" -txrpc.netfuncs='(*example.com/pay.Client).Charge' "$@")
		vettool=$(measure1 "$dir" go vet -vettool="$bin" "$@")
		row "$label ($n pkgs) #$rep" "${vet% *}s ${vet#* }MB" "${lint% *}s ${lint#* }MB" "${flag% *}s ${flag#* }MB" \
			"${vettool% *}s ${vettool#* }MB" \
			"$(awk -v a="${lint% *}" -v b="${vet% *}" 'BEGIN { printf "%.2fx", a / b }')" \
			"$(awk -v a="${lint#* }" -v b="${vet#* }" 'BEGIN { printf "%.1fx", a / b }')"
	done
}

echo "go: $(go version | cut -d' ' -f3-)  cores: $(nproc)"
row "packages" "go vet" "idemlint" "idemlint -flag" "vet -vettool" "time" "memory"
measure "idem" "$root" ./...

tools=golang.org/x/tools@v0.52.0
tdir=$(go env GOMODCACHE)/$tools
if [ ! -d "$tdir" ]; then
	go mod download "$tools" >/dev/null 2>&1 || true
fi
if [ -d "$tdir" ]; then
	cp -r "$tdir" "$work/tools"
	chmod -R u+w "$work/tools"
	(cd "$work/tools" && GOFLAGS=-mod=mod go mod download >/dev/null 2>&1) || true
	measure "x/tools" "$work/tools" ${TOOLS_PKGS:-./go/...}
else
	echo "golang.org/x/tools not in the module cache and not downloadable: skipped"
fi

for d in ${IDEMLINT_BENCH_DIRS:-}; do
	measure "$(basename "$d")" "$d" ./...
done
