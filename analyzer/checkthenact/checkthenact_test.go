package checkthenact_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestCheckthenact(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), checkthenact.New(checkthenact.Config{}), "ct")
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
	analysistest.RunWithSuggestedFixes(t, ruletest.Testdata(), checkthenact.New(checkthenact.Config{}), "ctfix")
}

// TestCheckthenactDataFlow: the read and the write held in variables, a
// fmt.Sprintf of a constant table or a package query struct; a text that
// differs by path is silent.
func TestCheckthenactDataFlow(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), checkthenact.New(checkthenact.Config{}), "ctflow")
	ruletest.CheckFindings(t, results, 2)
}
