package blindupdate_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/blindupdate"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestBlindupdate(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), blindupdate.New(blindupdate.Config{}), "bu", "bucaller", "busqlc")
	ruletest.CheckFindings(t, results, 12)
}

func TestBlindupdateFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, ruletest.Testdata(), blindupdate.New(blindupdate.Config{}), "bufix")
}

// TestBlindupdateDataFlow: SQL text held in a local variable (also one
// built in steps), a package constant or variable, fmt.Sprintf with a
// constant format, or a field of a query struct; a text that differs by
// path or is written elsewhere is silent.
func TestBlindupdateDataFlow(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), blindupdate.New(blindupdate.Config{}), "buflow")
	ruletest.CheckFindings(t, results, 8)
}

// TestBlindupdateFlags: a column named like a state that holds a boolean
// flag (a Go bool, *bool or sql.NullBool bound to its placeholder, or a SQL
// boolean literal) is not a workflow state; the same name holding a string
// or an integer, a flag beside a real state column, and values spread
// from a slice stay reported.
func TestBlindupdateFlags(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), blindupdate.New(blindupdate.Config{}), "buflag")
	ruletest.CheckFindings(t, results, 6)
}
