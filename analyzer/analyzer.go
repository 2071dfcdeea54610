// Package analyzer is idemlint's suite: the rules txrpc, timeoutfail,
// tokenorder, blindupdate, checkthenact, serverkey and bypass, built over
// one shared facts analyzer.
package analyzer

import (
	"fmt"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/blindupdate"
	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/serverkey"
	"github.com/idemkit/idem/analyzer/timeoutfail"
	"github.com/idemkit/idem/analyzer/tokenorder"
	"github.com/idemkit/idem/analyzer/txrpc"
)

// Rules lists the rule names, in order.
var Rules = []string{txrpc.Name, timeoutfail.Name, tokenorder.Name, blindupdate.Name, checkthenact.Name, serverkey.Name, bypass.Name}

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
	// StateColumns are more columns holding a state machine's state (blindupdate).
	StateColumns []string `json:"columns,omitempty"`
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
	if !off[blindupdate.Name] {
		out = append(out, blindupdate.New(blindupdate.Config{StateColumns: s.StateColumns}))
	}
	if !off[checkthenact.Name] {
		out = append(out, checkthenact.New(checkthenact.Config{Facts: f, Tables: s.TokenTables}))
	}
	if !off[serverkey.Name] {
		out = append(out, serverkey.New(serverkey.Config{}))
	}
	if !off[bypass.Name] {
		out = append(out, bypass.New(bypass.Config{}))
	}
	return out, nil
}

// Analyzers returns the default analyzers (txrpc.Analyzer,
// timeoutfail.Analyzer, tokenorder.Analyzer, ..., bypass.Analyzer), which
// share facts.Shared.
func Analyzers() []*analysis.Analyzer {
	return []*analysis.Analyzer{txrpc.Analyzer, timeoutfail.Analyzer, tokenorder.Analyzer,
		blindupdate.Analyzer, checkthenact.Analyzer, serverkey.Analyzer, bypass.Analyzer}
}
