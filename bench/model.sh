#!/usr/bin/env bash
# The exhaustive model check's full run: every configuration of
# runtime/storetest/model (CI runs the ones marked ci), explored to
# exhaustion, with the table docs/reliability.md ("Results") quotes:
# states, steps, depth, the liveness bound k and the time of each.
#
#   bench/model.sh            all configurations, without -race
set -euo pipefail
cd "$(dirname "$0")/.."
echo "# $(date -u +%FT%TZ) $(go version) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
IDEM_MODEL_FULL=1 go test -count=1 -timeout 60m -run 'TestExhaustive$' -v ./runtime/storetest/model/ |
	awk '/figures \(docs\/reliability.md\)/ {on = 1; next} on && /^ *\|/ {sub(/^ */, ""); print} /^--- (PASS|FAIL)/ {on = 0; print}'
