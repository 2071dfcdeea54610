// Package analyzer is idemlint's suite: the rules txrpc, timeoutfail and
// tokenorder, built over one shared facts analyzer.
package analyzer

import (
	"fmt"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/timeoutfail"
	"github.com/idemkit/idem/analyzer/tokenorder"
	"github.com/idemkit/idem/analyzer/txrpc"
)

// Rules lists the rule names, in order.
var Rules = []string{txrpc.Name, timeoutfail.Name, tokenorder.Name}

// Settings configures a suite. The JSON names are the golangci-lint plugin
// settings.
type Settings struct {
	// Disable lists rules to leave out.
	Disable []string `json:"disable,omitempty"`
	// NetFuncs are extra network functions, e.g. "(*example.com/pay.Client).Charge".
	NetFuncs []string `json:"netfuncs,omitempty"`
	// TxRunners are extra functions that run their func argument inside a transaction.
	TxRunners []string `json:"txrunners,omitempty"`
	// TokenTables are SQL tables holding idempotency tokens or records.
	TokenTables []string `json:"tables,omitempty"`
}

// New returns the enabled rules of a suite configured by s; they share one
// facts analyzer.
func New(s Settings) ([]*analysis.Analyzer, error) {
	off := map[string]bool{}
	for _, d := range s.Disable {
		known := false
		for _, r := range Rules {
			known = known || r == d
		}
		if !known {
			return nil, fmt.Errorf("idemlint: unknown rule %q in disable (rules: %v)", d, Rules)
		}
		off[d] = true
	}
	f := facts.New(facts.Config{NetFuncs: s.NetFuncs, TxRunners: s.TxRunners, TokenTables: s.TokenTables})
	var out []*analysis.Analyzer
	if !off[txrpc.Name] {
		out = append(out, txrpc.New(txrpc.Config{Facts: f}))
	}
	if !off[timeoutfail.Name] {
		out = append(out, timeoutfail.New(timeoutfail.Config{Facts: f}))
	}
	if !off[tokenorder.Name] {
		out = append(out, tokenorder.New(tokenorder.Config{Facts: f}))
	}
	return out, nil
}

// Analyzers returns the default analyzers (txrpc.Analyzer,
// timeoutfail.Analyzer, tokenorder.Analyzer), which share facts.Shared.
func Analyzers() []*analysis.Analyzer {
	return []*analysis.Analyzer{txrpc.Analyzer, timeoutfail.Analyzer, tokenorder.Analyzer}
}
