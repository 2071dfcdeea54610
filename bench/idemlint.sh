#!/usr/bin/env bash
# bench/idemlint.sh: wall time of idemlint next to go vet on the same
# packages: this repository, and golang.org/x/tools (a mid-size real module,
# fetched into the module cache with go mod download when missing).
#
# Each measurement uses a fresh GOCACHE, warmed first with the export data of
# the packages, their tests and dependencies (`go list -export -deps -test`),
# so that compiling is not measured and go vet's own result cache cannot
# answer (every tool runs exactly once per cache).
#
# Columns: go vet (default analyzers), idemlint run directly (loads
# everything from source once), go vet -vettool=idemlint (per-package units,
# facts through files), and the ratio idemlint/go vet.
#
# Usage: bench/idemlint.sh [reps]   (default 1; TOOLS_PKGS overrides ./go/...)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-1}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

bin=$work/idemlint
(cd "$root" && GOCACHE=$(go env GOCACHE) go build -o "$bin" ./cmd/idemlint)

now() { date +%s%N; }

# secs DIR CMD...: wall seconds of CMD in DIR (its exit status is ignored:
# findings make the checkers exit non-zero).
secs() {
	local dir=$1
	shift
	local s e
	s=$(now)
	(cd "$dir" && "$@" >/dev/null 2>&1) || true
	e=$(now)
	awk -v n=$((e - s)) 'BEGIN { printf "%.2f", n / 1e9 }'
}

row() { printf '%-28s %9s %10s %16s %8s\n' "$@"; }

measure() {
	local label=$1 dir=$2
	shift 2
	local n
	n=$(cd "$dir" && go list "$@" 2>/dev/null | wc -l)
	for rep in $(seq "$reps"); do
		export GOCACHE=$work/cache-$label-$rep
		# export data of every package and test variant: what go vet compiles first
		(cd "$dir" && go list -export -deps -test "$@" >/dev/null 2>&1) || true
		local vet lint vettool
		vet=$(secs "$dir" go vet "$@")
		lint=$(secs "$dir" "$bin" "$@")
		vettool=$(secs "$dir" go vet -vettool="$bin" "$@")
		row "$label ($n pkgs) #$rep" "${vet}s" "${lint}s" "${vettool}s" \
			"$(awk -v a="$lint" -v b="$vet" 'BEGIN { printf "%.2fx", a / b }')"
	done
}

echo "go: $(go version | cut -d' ' -f3-)  cores: $(nproc)"
row "packages" "go vet" "idemlint" "vet -vettool" "ratio"
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
