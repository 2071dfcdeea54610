package blindupdate_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/blindupdate"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      ruletest.Testdata(),
	Analyzer: func() *analysis.Analyzer { return blindupdate.New(blindupdate.Config{}) },
	Patterns: []string{"bu", "bucaller", "busqlc", "bufix", "buflow", "buflag"},
	Fix:      true,
}

func TestBlindupdate(t *testing.T) {
	results := rules.Results(t, "bu", "bucaller", "busqlc")
	ruletest.CheckFindings(t, results, 12)
}

func TestBlindupdateFix(t *testing.T) {
	rules.Results(t, "bufix")
}

// TestBlindupdateDataFlow: SQL text held in a local variable (also one
// built in steps), a package constant or variable, fmt.Sprintf with a
// constant format, or a field of a query struct; a text that differs by
// path or is written elsewhere is silent.
func TestBlindupdateDataFlow(t *testing.T) {
	results := rules.Results(t, "buflow")
	ruletest.CheckFindings(t, results, 8)
}

// TestBlindupdateFlags: a column named like a state that holds a boolean
// flag (a Go bool, *bool or sql.NullBool bound to its placeholder, or a SQL
// boolean literal) is not a workflow state; the same name holding a string
// or an integer, a flag beside a real state column, and values spread
// from a slice stay reported.
func TestBlindupdateFlags(t *testing.T) {
	results := rules.Results(t, "buflag")
	ruletest.CheckFindings(t, results, 6)
}
