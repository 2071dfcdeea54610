#!/usr/bin/env bash
# Benchmarks idemgen on a package with 200 annotated methods (10 services of
# 20 ops) and reports the split between package loading, checking and
# emitting:
#
#   bench/idemgen.sh            go test -bench, then the CLI end to end
#   COUNT=10 bench/idemgen.sh   more benchmark iterations
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
count=${COUNT:-10}

echo "== go test -bench (in process; Timing from generator.Generate)"
go test -run '^$' -bench 'Generate200|CheckEmit200' -benchtime "${count}x" ./generator

echo
echo "== idemgen CLI end to end on the same package shape"
work=$(mktemp -d "${TMPDIR:-/tmp}/idemgen-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
go build -o "$work/idemgen" ./cmd/idemgen
mkdir -p "$work/mod/big"
cat >"$work/mod/go.mod" <<MOD
module example.com/bench

go 1.26

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => $root
MOD
cp go.sum "$work/mod/go.sum"
{
	printf 'package big\n\nimport (\n\t"context"\n\n\t"github.com/idemkit/idem/runtime"\n)\n\n'
	printf 'type Req struct {\n\tKey    string\n\tTenant string\n}\n\ntype Resp struct{ ID string }\n'
	for s in $(seq -w 0 9); do
		printf '\n//idem:service\ntype Service%s interface {\n' "$s"
		for o in $(seq -w 0 19); do
			printf '\t//idem:op key=req.Key scope=req.Tenant lease=30s ttl=24h reconcile=Find\n'
			printf '\tOp%s(ctx context.Context, req Req) (Resp, error)\n' "$o"
		done
		printf '\t//idem:skip\n\tFind(ctx context.Context, req Req) (Resp, runtime.Outcome, error)\n}\n'
	done
} >"$work/mod/big/big.go"
cd "$work/mod/big"
export GOFLAGS=-mod=mod GOWORK=off
"$work/idemgen" >/dev/null # warm the build cache
for i in 1 2 3; do
	start=$(date +%s%N)
	"$work/idemgen" -v | tail -1
	end=$(date +%s%N)
	echo "  wall clock: $(((end - start) / 1000000)) ms"
done
"$work/idemgen" -check && echo "  -check: up to date ($(ls ./*_idem.go | wc -l) files)"
