#!/usr/bin/env bash
# bench/lsp.sh: idemlint's language server (`idemlint lsp`) on pocketbase
# v0.36.8 (44 packages, 120k lines; fetched as bench/idemlint.sh does),
# driven by bench/lspbench as an editor drives it, next to the command line
# in the same run:
#
#   - time from initialize to the first diagnostics of an opened handler
#     file (apis/record_crud.go), against `idemlint ./apis` run cold (a new
#     process) for that package's program;
#   - time from a one-line edit + save of a file of a leaf package
#     (examples/base/main.go, imported by no package) to its fresh
#     diagnostics, median over the session of edits (default 50);
#   - the server's peak RSS over that session, against `go vet ./...`'s
#     peak (GNU time's maximum RSS: the largest process of the tree).
#
# The server runs twice: with its default patterns (./..., what
# `idemlint ./...` analyzes from the workspace folder) and with
# initializationOptions {"patterns": ["./apis"]}. As in bench/idemlint.sh,
# each measurement uses a GOCACHE warmed with the export data of every
# package (`go list -export -deps -test ./...`), so that compiling is not
# measured.
#
# Usage: bench/lsp.sh [edits]   (default 50)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
edits=${1:-50}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

timer=/usr/bin/time
if ! "$timer" -f %M true >/dev/null 2>&1; then
	echo "bench/lsp.sh needs GNU time at /usr/bin/time (apt-get install time)" >&2
	exit 1
fi
# Everything, the builds too, uses a cache of its own: another go command
# trimming the shared one cannot pull files from under it.
export GOCACHE=$work/cache
(cd "$root" && go build -o "$work/idemlint" ./cmd/idemlint && go build -o "$work/lspbench" ./bench/lspbench)

mod=github.com/pocketbase/pocketbase@v0.36.8
src=$(go env GOMODCACHE)/$mod
[ -d "$src" ] || go mod download "$mod" >/dev/null 2>&1 || true
if [ ! -d "$src" ]; then
	echo "pocketbase not in the module cache and not downloadable" >&2
	exit 1
fi
pb=$work/pocketbase
cp -r "$src" "$pb" && chmod -R u+w "$pb"
(cd "$pb" && GOFLAGS=-mod=mod go mod download >/dev/null 2>&1) || true
(cd "$pb" && go list -export -deps -test ./... >/dev/null 2>&1) || true

# measure CMD...: "wall-seconds MB cpu-seconds" of CMD in the module.
measure() {
	(cd "$pb" && { "$timer" -f '%e %M %U %S' "$@" >/dev/null 2>"$work/err" || true; } && tail -1 "$work/err") |
		awk '{ printf "%.2fs wall, %.0f MB peak RSS, %.2fs CPU", $1, $2 / 1024, $3 + $4 }'
}

echo "go: $(go version | cut -d' ' -f3-)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "idemlint ./apis (cold process):  $(measure "$work/idemlint" ./apis)"
echo "idemlint ./... (cold process):   $(measure "$work/idemlint" ./...)"
echo "go vet ./...:                    $(measure go vet ./...)"
for opts in null '{"patterns":["./apis"]}'; do
	echo "idemlint lsp, initializationOptions $opts:"
	"$work/lspbench" -server "$work/idemlint" -dir "$pb" -open apis/record_crud.go \
		-edit examples/base/main.go -edits "$edits" -options "$opts" | sed 's/^/  /'
done
