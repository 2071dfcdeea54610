package checkthenact_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      ruletest.Testdata(),
	Analyzer: func() *analysis.Analyzer { return checkthenact.New(checkthenact.Config{}) },
	Patterns: []string{"ct", "ctfix", "ctflow"},
	Fix:      true,
}

func TestCheckthenact(t *testing.T) {
	results := rules.Results(t, "ct")
	ruletest.CheckFindings(t, results, 12)
}

func TestCheckthenactTables(t *testing.T) {
	a := checkthenact.New(checkthenact.Config{})
	if err := a.Flags.Set("tables", "request_log"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, ruletest.Testdata(), a, "ctcfg")
}

func TestCheckthenactFix(t *testing.T) {
	rules.Results(t, "ctfix")
}

// TestCheckthenactDataFlow: the read and the write held in variables, a
// fmt.Sprintf of a constant table or a package query struct; a text that
// differs by path is silent.
func TestCheckthenactDataFlow(t *testing.T) {
	results := rules.Results(t, "ctflow")
	ruletest.CheckFindings(t, results, 2)
}
