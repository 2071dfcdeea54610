#!/usr/bin/env bash
# Runs the whole test suite (scripts/test.sh, what CI runs) several times in a
# row under a CPU hog, and lists every test that failed with its rate.
#
#   bench/ciload.sh                 10 runs, load kept at 2x the cores
#   bench/ciload.sh -n 3 -load 6    3 runs, load kept at 6
#   bench/ciload.sh -stop-on-fail   stop at the first failing run
#
# The suite runs from a clone of HEAD in a scratch directory, so the code
# under test does not move while the runs go on (commit first). The Go caches
# are the machine's own: this measures flakes, not cold builds (for a cold
# run, clone afresh with empty GOCACHE and GOMODCACHE and time .ci/run).
#
# The hog is adaptive: every half second it reads the number of runnable
# threads (/proc/loadavg's fourth field, its own spinners included), and
# over each 10 s window it adds a spinner when the mean is below the target
# and removes one when it is above, between 0 and 2x the cores. So the load
# stays at the target whatever else the machine runs, and the suite never
# runs on an idle machine while it waits on servers. Each run's mean 1-minute
# load average (sampled every 10 s) is in the table.
#
# Results go to $CILOAD_DIR (default: a new directory under /tmp): a log per
# run and summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
target=$(($(nproc) * 2))
stop_on_fail=0
while [ $# -gt 0 ]; do
	case "$1" in
	-n) runs=$2; shift 2 ;;
	-load) target=$2; shift 2 ;;
	-stop-on-fail) stop_on_fail=1; shift ;;
	*) echo "usage: bench/ciload.sh [-n RUNS] [-load TARGET] [-stop-on-fail]" >&2; exit 2 ;;
	esac
done

out=${CILOAD_DIR:-$(mktemp -d /tmp/ciload.XXXXXX)}
mkdir -p "$out"
head=$(git rev-parse --short HEAD)
git diff --quiet HEAD || echo "warning: uncommitted changes are not tested (the clone is of $head)" >&2
clone="$out/clone"
rm -rf "$clone"
git clone -q "$(pwd)" "$clone"
git -C "$clone" checkout -q "$head"

spinners=()
add_spinner() { (while :; do :; done) & spinners+=($!); }
drop_spinner() {
	local last=$((${#spinners[@]} - 1))
	kill "${spinners[$last]}" 2>/dev/null || true
	wait "${spinners[$last]}" 2>/dev/null || true
	unset "spinners[$last]"
}
hog() {
	local max=$(($(nproc) * 2)) sum n runnable
	trap 'while [ ${#spinners[@]} -gt 0 ]; do drop_spinner; done; exit 0' TERM INT
	for _ in $(seq 1 "$(nproc)"); do add_spinner; done
	while :; do
		sum=0
		for n in $(seq 1 20); do
			runnable=$(cut -d' ' -f4 /proc/loadavg)
			sum=$((sum + ${runnable%/*} - 1)) # less the reading's own process
			sleep 0.5
		done
		# mean over the window, in tenths
		if [ $((sum * 10 / 20)) -lt $((target * 10 - 5)) ] && [ ${#spinners[@]} -lt "$max" ]; then
			add_spinner
		elif [ $((sum * 10 / 20)) -gt $((target * 10 + 5)) ] && [ ${#spinners[@]} -gt 0 ]; then
			drop_spinner
		fi
	done
}
loadrec() {
	while :; do
		cut -d' ' -f1 /proc/loadavg >>"$1"
		sleep 10
	done
}

hog &
hog_pid=$!
suite=""
rec=""
# On exit (a finished series, or this script stopped), the hog goes, and a
# suite still running is stopped as a whole (its own process group):
# scripts/test.sh's trap then stops the servers it started.
cleanup() {
	kill "$hog_pid" $rec 2>/dev/null || true
	wait "$hog_pid" $rec 2>/dev/null || true
	if [ -n "$suite" ]; then
		kill -TERM -- "-$suite" 2>/dev/null || true
		wait "$suite" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary="$out/summary.txt"
{
	echo "bench/ciload.sh: $runs runs of scripts/test.sh at $head, load target $target ($(nproc) cores), $(date -u +%FT%TZ)"
	printf '%-4s %-8s %-6s %-9s %s\n' run result time load failed
} | tee "$summary"
fails=0
for i in $(seq 1 "$runs"); do
	log="$out/run$i.log"
	loads="$out/run$i.load"
	: >"$loads"
	loadrec "$loads" &
	rec=$!
	start=$(date +%s)
	rc=0
	setsid bash -c 'cd "$1" && exec bash scripts/test.sh' _ "$clone" >"$log" 2>&1 &
	suite=$!
	wait "$suite" || rc=$?
	suite=""
	secs=$(($(date +%s) - start))
	kill "$rec" 2>/dev/null || true
	wait "$rec" 2>/dev/null || true
	rec=""
	load=$(awk '{s += $1; n++} END {if (n) printf "%.1f", s / n; else print "-"}' "$loads")
	result=ok
	failed=""
	if [ "$rc" -ne 0 ]; then
		result=FAIL
		fails=$((fails + 1))
		# the deepest failing tests (subtests name their parents too), or the package
		# (a run that failed before any test, say in a check, has no
		# "--- FAIL" line: grep's status must not end the series under
		# set -e and pipefail)
		failed=$(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | sort -u | tr '\n' ' ' || true)
		[ -n "$failed" ] || failed=$(grep -E '^(FAIL|panic:|\[.*\] )' "$log" | tail -3 | tr '\n' ' ' || true)
	fi
	printf '%-4s %-8s %-6s %-9s %s\n' "$i" "$result" "$((secs / 60))m$((secs % 60))s" "$load" "$failed" | tee -a "$summary"
	if [ "$rc" -ne 0 ] && [ "$stop_on_fail" = 1 ]; then
		break
	fi
done
{
	echo "failed runs: $fails of $i"
	if [ "$fails" -gt 0 ]; then
		echo "tests that failed (runs failed in / runs):"
		grep -hoE -- '--- FAIL: [^ ]+' "$out"/run*.log | awk '{print $3}' | sort | uniq -c |
			awk -v n="$i" '{printf "  %s: %d/%d\n", $2, $1, n}' || true
	fi
} | tee -a "$summary"
echo "logs: $out" >&2
[ "$fails" -eq 0 ]
