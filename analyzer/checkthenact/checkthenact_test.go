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
