#!/usr/bin/env bash
# Runs a command and stalls it as a loaded machine or a GC pause would: every
# EVERY milliseconds the command's process is stopped (SIGSTOP) for STOP
# milliseconds, then continued. A stall longer than a tenth of a lease
# opens the window the runtime documents for a process that does not run
# (docs/reliability.md): the simulations measure their stalls and excuse
# only what such a stall allows, so a run under this script tells an
# excuse that is missing from a real violation.
#
#   bench/stall.sh [-stop MS] [-every MS] -- COMMAND [ARGS...]
#
# The defaults (700 ms every 1200 ms) stall a sim's 600 ms lease past its
# end. Run a test binary directly, not `go test` (whose child would run on):
#
#   go test -race -c -o /tmp/pgstore.test ./runtime/pgstore
#   cd runtime/pgstore && IDEM_SIM_SEED=... ../../bench/stall.sh -- \
#       /tmp/pgstore.test -test.run '^TestSimDoors$/^grpc$' -test.v
#
# The command's exit status is the script's.
set -euo pipefail

stop=700
every=1200
while [ $# -gt 0 ]; do
	case "$1" in
	-stop) stop=$2; shift 2 ;;
	-every) every=$2; shift 2 ;;
	--) shift; break ;;
	*) break ;;
	esac
done
if [ $# -eq 0 ] || [ "$stop" -ge "$every" ]; then
	echo "usage: bench/stall.sh [-stop MS] [-every MS] -- COMMAND [ARGS...] (STOP < EVERY)" >&2
	exit 2
fi

ms() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

"$@" &
pid=$!
(
	while kill -0 "$pid" 2>/dev/null; do
		sleep "$(ms $((every - stop)))"
		kill -STOP "$pid" 2>/dev/null || exit 0
		sleep "$(ms "$stop")"
		kill -CONT "$pid" 2>/dev/null || exit 0
	done
) &
staller=$!
status=0
wait "$pid" || status=$?
kill "$staller" 2>/dev/null || true
wait "$staller" 2>/dev/null || true
exit "$status"
