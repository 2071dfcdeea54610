// Command idemlint runs idemlint's analyzers (txrpc, timeoutfail,
// tokenorder, blindupdate, checkthenact, serverkey, bypass) over packages:
//
//	idemlint ./...
//	idemlint -json ./...
//	idemlint -timeoutfail=false -txrpc.netfuncs='(*example.com/pay.Client).Charge' ./...
//	go vet -vettool=$(command -v idemlint) ./...
//
// Exit status: 0 clean, 3 findings, 1 errors (as every go/analysis checker).
// See docs/idemlint.md.
package main

import (
	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/idemkit/idem/analyzer"
)

func main() { multichecker.Main(analyzer.Analyzers()...) }
