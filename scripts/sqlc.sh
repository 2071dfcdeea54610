#!/usr/bin/env bash
# Regenerates the sqlc code of runtime/pgstore/internal/db from queries/ with
# the sqlc pinned in tools/go.mod, and records the checksums of its inputs
# and outputs in runtime/pgstore/internal/db/sqlc.sum.
#
#   scripts/sqlc.sh          generate, then write sqlc.sum
#   scripts/sqlc.sh check    exit 0 when sqlc.sum matches the tree
#
# scripts/test.sh trusts the generated code when sqlc.sum matches (the code
# is what this script produced from these very inputs), and otherwise builds
# sqlc (a cgo build of several minutes) and runs `sqlc diff`.
set -euo pipefail
cd "$(dirname "$0")/.."
sum=runtime/pgstore/internal/db/sqlc.sum
files() {
	printf '%s\n' sqlc.yaml queries/schema.sql queries/records.sql queries/group.sql tools/go.mod tools/go.sum
	find runtime/pgstore/internal/db -name '*.go' | sort
}
case "${1:-generate}" in
check)
	# Every listed file unchanged, and no Go file there that is not listed.
	[ -f "$sum" ] && sha256sum --quiet --check "$sum" >/dev/null 2>&1 &&
		[ "$(files | sort -u)" = "$(awk '{print $2}' "$sum" | sort -u)" ]
	;;
generate)
	bin=$(mktemp -d)
	trap 'rm -rf "$bin"' EXIT
	go -C tools build -o "$bin/" github.com/sqlc-dev/sqlc/cmd/sqlc
	"$bin/sqlc" generate -f sqlc.yaml
	files | sort -u | xargs sha256sum >"$sum"
	echo "generated; wrote $sum"
	;;
*)
	echo "usage: scripts/sqlc.sh [generate|check]" >&2
	exit 2
	;;
esac
