#!/usr/bin/env bash
# Times a cold CI run: a fresh clone of HEAD, with empty Go caches (GOCACHE
# and GOMODCACHE in a scratch directory), running .ci/run as CI does
# (CI=true). It reports the wall time, the CPU time of everything the run
# started (user + system, from GNU time), the peak memory of one process,
# and the suite's own phase times (scripts/test.sh logs a timestamp per
# step), so that a figure in docs/reliability.md names its method.
#
#   bench/coldci.sh            one cold run
#   bench/coldci.sh -warm      the same clone, the machine's own Go caches
#
# Run it on a quiet machine: other work beside it is measured too (the
# 1-minute load average before and after is printed). Results go to
# $COLDCI_DIR (default: a new directory under /tmp): the run's log and
# summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

warm=0
while [ $# -gt 0 ]; do
	case "$1" in
	-warm) warm=1; shift ;;
	*) echo "usage: bench/coldci.sh [-warm]" >&2; exit 2 ;;
	esac
done
[ -x /usr/bin/time ] || { echo "bench/coldci.sh needs GNU time (/usr/bin/time; Debian package time)" >&2; exit 2; }

out=${COLDCI_DIR:-$(mktemp -d /tmp/coldci.XXXXXX)}
mkdir -p "$out"
head=$(git rev-parse --short HEAD)
git diff --quiet HEAD || echo "warning: uncommitted changes are not measured (the clone is of $head)" >&2
clone="$out/clone"
rm -rf "$clone"
git clone -q "$(pwd)" "$clone"
git -C "$clone" checkout -q "$head"

envs=(CI=true)
mode=warm
if [ "$warm" -eq 0 ]; then
	mode=cold
	# The module cache is read-only on disk: make it writable to remove it.
	[ -d "$out/cache" ] && chmod -R u+w "$out/cache" && rm -rf "$out/cache"
	mkdir -p "$out/cache/gocache" "$out/cache/gomodcache"
	envs+=(GOCACHE="$out/cache/gocache" GOMODCACHE="$out/cache/gomodcache")
fi

load_before=$(cut -d' ' -f1 /proc/loadavg)
start=$(date +%s)
rc=0
(cd "$clone" && env "${envs[@]}" /usr/bin/time -v -o "$out/time.txt" bash .ci/run) >"$out/run.log" 2>&1 || rc=$?
wall=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1 /proc/loadavg)

field() { sed -n "s/^\t$1: //p" "$out/time.txt"; }
user=$(field 'User time (seconds)')
sys=$(field 'System time (seconds)')
peak=$(field 'Maximum resident set size (kbytes)')
{
	echo "coldci: $mode run of $head on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "exit $rc, wall ${wall} s, CPU $(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.0f", u+s}') s (user $user, system $sys), largest process ${peak} KiB"
	echo "load average (1 min) before $load_before, after $load_after"
	echo "steps (scripts/test.sh's timestamps):"
	grep -E '^\[[0-9:]{8}\] ' "$out/run.log" | head -40 || true
	echo "packages over 60 s:"
	grep -E '^(ok|FAIL)[[:space:]]' "$out/run.log" | awk '{t=$NF; sub(/s$/,"",t); if (t+0 >= 60) print}' || true
} | tee "$out/summary.txt"
[ "$warm" -eq 1 ] || { chmod -R u+w "$out/cache" && rm -rf "$out/cache"; }
exit "$rc"
