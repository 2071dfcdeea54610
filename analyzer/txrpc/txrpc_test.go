package txrpc_test

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/txrpc"
	"github.com/idemkit/idem/internal/modtest"
)

// testdata is the GOPATH shared by the analyzers' tests (stubs once).
var testdata = filepath.Join(analysistest.TestData(), "..", "..", "testdata")

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      testdata,
	Analyzer: func() *analysis.Analyzer { return txrpc.New(txrpc.Config{}) },
	Patterns: []string{"a", "txrpcfix"},
	Fix:      true,
}

func TestTxrpc(t *testing.T) {
	results := rules.Results(t, "a")
	checkRelated(t, results)
}

func TestTxrpcConfigured(t *testing.T) {
	a := txrpc.New(txrpc.Config{
		NetFuncs:  []string{"(cfg.Gateway).Charge"},
		TxRunners: []string{"cfg.Store.Atomically"},
	})
	analysistest.Run(t, testdata, a, "cfg")
}

// TestTxrpcFlags sets the same configuration through the analyzer's flags.
func TestTxrpcFlags(t *testing.T) {
	a := txrpc.New(txrpc.Config{})
	if err := a.Flags.Set("netfuncs", "(cfg.Gateway).Charge"); err != nil {
		t.Fatal(err)
	}
	if err := a.Flags.Set("txrunners", "(cfg.Store).Atomically"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, testdata, a, "cfg")
}

// checkRelated checks the Related positions of chained diagnostics: where
// the transaction began and the leaf network call.
func checkRelated(t *testing.T, results []*analysistest.Result) {
	t.Helper()
	var checked int
	for _, r := range results {
		for _, d := range r.Diagnostics {
			if !strings.Contains(d.Message, " -> ") || strings.Contains(d.Message, "run by the call") {
				continue
			}
			var began, leaf bool
			for _, rel := range d.Related {
				pos := r.Pass.Fset.Position(rel.Pos)
				switch {
				case rel.Message == "transaction begun here":
					began = strings.HasSuffix(pos.Filename, "a.go")
				case strings.HasPrefix(rel.Message, "leaf network call: "), strings.Contains(rel.Message, "its leaf network call"):
					leaf = pos.IsValid()
				}
			}
			if !began || !leaf {
				t.Errorf("%v: %q: related %+v lacks the tx begin or the leaf call", r.Pass.Fset.Position(d.Pos), d.Message, d.Related)
			}
			checked++
		}
	}
	if checked < 3 {
		t.Errorf("checked %d diagnostics, want at least 3", checked)
	}
}

// TestTxrpcFix: a misspelled rule name in a suppression directive is
// reported with a fix that corrects it.
func TestTxrpcFix(t *testing.T) {
	rules.Results(t, "txrpcfix")
}

// TestTxrpcORM runs on code compiled against the real gorm, bun, sqlx, pop,
// ent (dialect; the generated client's shape is written out) and
// Firestore, in module mode.
func TestTxrpcORM(t *testing.T) {
	dir := modtest.Dir(t)
	analysistest.Run(t, dir, txrpc.New(txrpc.Config{}), "./txrpc/...")
}
