// Package analyzer is idemlint's suite: the rules txrpc, timeoutfail,
// tokenorder, blindupdate, checkthenact, serverkey and bypass, built over
// one shared facts analyzer.
package analyzer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/blindupdate"
	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/directive"
	"github.com/idemkit/idem/analyzer/serverkey"
	"github.com/idemkit/idem/analyzer/timeoutfail"
	"github.com/idemkit/idem/analyzer/tokenorder"
	"github.com/idemkit/idem/analyzer/txrpc"
)

// Rules lists the rule names, in order.
var Rules = []string{txrpc.Name, timeoutfail.Name, tokenorder.Name, blindupdate.Name, checkthenact.Name, serverkey.Name, bypass.Name}

// ReasonPlaceholder is the reason the language server's "suppress" code
// action writes into //idemlint:ignore <rule> <reason>, for the user to
// replace. A directive left with it suppresses, but has no reason: -json
// and -sarif list the suppression without a justification.
const ReasonPlaceholder = directive.Placeholder

// SuppressedCategory prefixes the Category of a diagnostic that a
// directive suppresses, once [KeepSuppressed] is on; the rest of the
// Category is the directive's reason ("" when it has none).
const SuppressedCategory = directive.SuppressedCategory

// KeepSuppressed makes the rules report the diagnostics their directives
// suppress (marked with SuppressedCategory) instead of dropping them, for
// drivers that list suppressions. It is off by default and for go vet,
// golangci-lint and analysistest.
func KeepSuppressed(on bool) { directive.KeepSuppressed(on) }

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
	// TxTypes are extra transaction types, e.g. "example.com/store.Tx".
	TxTypes []string `json:"txtypes,omitempty"`
	// FailFuncs are extra functions that take a definite-failure action.
	FailFuncs []string `json:"failfuncs,omitempty"`
	// TokenDels are extra functions that delete an idempotency token.
	TokenDels []string `json:"tokendels,omitempty"`
	// StateColumns are more columns holding a state machine's state (blindupdate).
	StateColumns []string `json:"columns,omitempty"`
}

// ConfigFile is the name of the configuration file read from the module
// root by the idemlint command. It holds a JSON object with the keys of
// [Settings] (the golangci-lint plugin's settings take the same keys).
const ConfigFile = ".idemlint.json"

// LoadConfig finds the module root at or above dir (the directory with
// go.mod) and reads its ConfigFile. It returns the zero Settings and an
// empty path when there is no module root or no file.
func LoadConfig(dir string) (Settings, string, error) {
	var s Settings
	dir, err := filepath.Abs(dir)
	if err != nil {
		return s, "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			return s, "", nil
		}
		dir = up
	}
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, "", nil
	}
	if err != nil {
		return s, path, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, path, fmt.Errorf("%s: %v", path, err)
	}
	if _, err := New(s); err != nil {
		return s, path, fmt.Errorf("%s: %v", path, err)
	}
	return s, path, nil
}

// New returns the enabled rules of a suite configured by s; they share one
// facts analyzer.
func New(s Settings) ([]*analysis.Analyzer, error) {
	as, _, err := NewSuite(s, facts.Config{})
	return as, err
}

// NewSuite is New for drivers: base supplies the facts analyzer's
// whole-program fields (Program, Recording, Consumers, NoRelated); the lists
// come from s. It also returns the shared facts analyzer.
func NewSuite(s Settings, base facts.Config) ([]*analysis.Analyzer, *facts.Facts, error) {
	off := map[string]bool{}
	for _, d := range s.Disable {
		known := false
		for _, r := range Rules {
			known = known || r == d
		}
		if !known {
			return nil, nil, fmt.Errorf("idemlint: unknown rule %q in disable (rules: %v)", d, Rules)
		}
		off[d] = true
	}
	base.NetFuncs, base.TxRunners, base.TokenTables = s.NetFuncs, s.TxRunners, s.TokenTables
	base.TxTypes, base.FailFuncs, base.TokenDels = s.TxTypes, s.FailFuncs, s.TokenDels
	f := facts.New(base)
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
		out = append(out, blindupdate.New(blindupdate.Config{StateColumns: s.StateColumns, Facts: f}))
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
	return out, f, nil
}

// Analyzers returns the default analyzers (txrpc.Analyzer,
// timeoutfail.Analyzer, tokenorder.Analyzer, ..., bypass.Analyzer), which
// share facts.Shared.
func Analyzers() []*analysis.Analyzer {
	return []*analysis.Analyzer{txrpc.Analyzer, timeoutfail.Analyzer, tokenorder.Analyzer,
		blindupdate.Analyzer, checkthenact.Analyzer, serverkey.Analyzer, bypass.Analyzer}
}
