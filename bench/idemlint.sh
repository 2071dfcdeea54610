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
# Columns: wall seconds, CPU seconds (user + system, of the whole process
# tree) and peak resident memory (GNU time's maximum RSS: the largest
# process of the tree, so for go vet the largest of its per-package vet
# processes) of go vet (default analyzers), idemlint run directly (the whole
# program in one process), idemlint with a configuration flag set, and
# go vet -vettool=idemlint (per-package units); then idemlint/go vet ratios
# of wall time, CPU time and memory. The order alternates from one rep to
# the next (odd reps run go vet first, even reps idemlint first), so that
# neither side always finds the other's files in the page cache; on a
# shared machine, run several reps and compare the ratios rep by rep.
#
# The modules: this repository, golang.org/x/tools v0.52.0 (./go/...),
# pocketbase v0.36.8 (44 packages, 120k lines; the last version that builds
# with Go 1.26), both fetched with go mod download when missing, and any
# module directories given in IDEMLINT_BENCH_DIRS.
#
# Usage: bench/idemlint.sh [reps]   (default 1; TOOLS_PKGS overrides ./go/...;
# IDEMLINT_BENCH_ONLY=pocketbase runs that module alone)
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

# measure1 DIR CMD...: "wall-seconds MB cpu-seconds" of CMD in DIR (its
# exit status is ignored: findings make the checkers exit non-zero).
measure1() {
	local dir=$1
	shift
	local out
	out=$(cd "$dir" && { "$timer" -f '%e %M %U %S' "$@" >/dev/null 2>"$work/err" || true; } && tail -1 "$work/err")
	echo "$out" | awk '{ printf "%.2f %.0f %.2f", $1, $2 / 1024, $3 + $4 }'
}

# fmt1 "wall MB cpu": "12.3s 456MB 20.1cpu"
fmt1() { echo "$1" | awk '{ printf "%ss %sMB %scpu", $1, $2, $3 }'; }
# ratio A B FIELD: A's field over B's
ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2fx", x[f] / y[f] }'; }

row() { printf '%-26s %24s %24s %24s %24s %6s %6s %6s\n' "$@"; }

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
		if ((rep % 2)); then
			vet=$(measure1 "$dir" go vet "$@")
			lint=$(measure1 "$dir" "$bin" "$@")
		else
			lint=$(measure1 "$dir" "$bin" "$@")
			vet=$(measure1 "$dir" go vet "$@")
		fi
		flag=$(measure1 "$dir" "$bin" -txrpc.netfuncs='(*example.com/pay.Client).Charge' "$@")
		vettool=$(measure1 "$dir" go vet -vettool="$bin" "$@")
		row "$label ($n pkgs) #$rep" "$(fmt1 "$vet")" "$(fmt1 "$lint")" "$(fmt1 "$flag")" "$(fmt1 "$vettool")" \
			"$(ratio "$lint" "$vet" 1)" "$(ratio "$lint" "$vet" 3)" "$(ratio "$lint" "$vet" 2)"
	done
}

echo "go: $(go version | cut -d' ' -f3-)  cores: $(nproc)"
row "packages" "go vet" "idemlint" "idemlint -flag" "vet -vettool" "wall" "cpu" "memory"
only=${IDEMLINT_BENCH_ONLY:-}
# fetch MODULE@VERSION DIR: a writable copy of a module from the module cache
fetch() {
	local src
	src=$(go env GOMODCACHE)/$1
	[ -d "$src" ] || go mod download "$1" >/dev/null 2>&1 || true
	[ -d "$src" ] || return 1
	cp -r "$src" "$2" && chmod -R u+w "$2"
	(cd "$2" && GOFLAGS=-mod=mod go mod download >/dev/null 2>&1) || true
}

if [ -z "$only" ] || [ "$only" = pocketbase ]; then
	if fetch github.com/pocketbase/pocketbase@v0.36.8 "$work/pocketbase"; then
		measure "pocketbase" "$work/pocketbase" ./...
	else
		echo "pocketbase not in the module cache and not downloadable: skipped"
	fi
fi
[ -n "$only" ] && exit 0
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
