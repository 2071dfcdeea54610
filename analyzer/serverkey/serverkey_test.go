package serverkey_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/serverkey"
)

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      ruletest.Testdata(),
	Analyzer: func() *analysis.Analyzer { return serverkey.New(serverkey.Config{}) },
	Patterns: []string{"sk", "skclient", "skfix"},
	Fix:      true,
}

func TestServerkey(t *testing.T) {
	results := rules.Results(t, "sk")
	ruletest.CheckFindings(t, results, 12)
}

func TestServerkeyFix(t *testing.T) {
	rules.Results(t, "skfix")
}
