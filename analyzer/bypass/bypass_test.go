package bypass_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      ruletest.Testdata(),
	Analyzer: func() *analysis.Analyzer { return bypass.New(bypass.Config{}) },
	Patterns: []string{"bp", "bpimpl", "bpfix"},
	Fix:      true,
}

func TestBypass(t *testing.T) {
	results := rules.Results(t, "bp", "bpimpl")
	ruletest.CheckFindings(t, results, 12)
}

func TestBypassFix(t *testing.T) {
	rules.Results(t, "bpfix")
}
