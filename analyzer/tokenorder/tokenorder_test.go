package tokenorder_test

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/tokenorder"
	"github.com/idemkit/idem/internal/modtest"
)

// testdata is the GOPATH shared by the analyzers' tests (stubs once).
var testdata = filepath.Join(analysistest.TestData(), "..", "..", "testdata")

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      testdata,
	Analyzer: func() *analysis.Analyzer { return tokenorder.New(tokenorder.Config{}) },
	Patterns: []string{"k", "tokenorderfix", "kflow"},
	Fix:      true,
}

func TestTokenorder(t *testing.T) {
	results := rules.Results(t, "k")
	// Every finding points at the effect (and, for check-then-act, at the
	// check and the consume).
	n := 0
	for _, r := range results {
		for _, d := range r.Diagnostics {
			if strings.HasPrefix(d.Message, "idemlint:ignore") {
				continue
			}
			n++
			want := 1
			if strings.Contains(d.Message, "non-atomic check") {
				want = 2
			}
			if len(d.Related) != want {
				t.Errorf("%v: related = %+v, want %d", r.Pass.Fset.Position(d.Pos), d.Related, want)
			}
			for _, rel := range d.Related {
				if !rel.Pos.IsValid() || rel.Pos == d.Pos {
					t.Errorf("%v: bad related position %+v", r.Pass.Fset.Position(d.Pos), rel)
				}
			}
		}
	}
	if n < 15 {
		t.Errorf("%d findings, want at least 15", n)
	}
}

func TestTokenorderTables(t *testing.T) {
	a := tokenorder.New(tokenorder.Config{})
	if err := a.Flags.Set("tables", "request_log"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, testdata, a, "kcfg")
}

// TestTokenorderFix: a misspelled rule name in a suppression directive is
// reported with a fix that corrects it.
func TestTokenorderFix(t *testing.T) {
	rules.Results(t, "tokenorderfix")
}

// TestTokenorderORM: tokens kept through a repository interface or gorm.
func TestTokenorderORM(t *testing.T) {
	analysistest.Run(t, modtest.Dir(t), tokenorder.New(tokenorder.Config{}), "./tokenorder/...")
}

// TestTokenorderDataFlow: token deletes and checks whose SQL is built with
// fmt.Sprintf, held in a package variable or a query struct, or by a
// squirrel delete builder; a text that differs by path or is rewritten
// elsewhere, a squirrel delete of another table and a squirrel
// compare-and-set claim are silent.
func TestTokenorderDataFlow(t *testing.T) {
	rules.Results(t, "kflow")
}
