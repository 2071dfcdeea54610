package bypass_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestBypass(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), bypass.New(bypass.Config{}), "bp", "bpimpl")
	ruletest.CheckFindings(t, results, 12)
}

func TestBypassFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, ruletest.Testdata(), bypass.New(bypass.Config{}), "bpfix")
}
