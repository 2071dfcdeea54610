package serverkey_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/serverkey"
)

func TestServerkey(t *testing.T) {
	results := analysistest.Run(t, ruletest.Testdata(), serverkey.New(serverkey.Config{}), "sk")
	ruletest.CheckFindings(t, results, 12)
}

func TestServerkeyFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, ruletest.Testdata(), serverkey.New(serverkey.Config{}), "skfix")
}
