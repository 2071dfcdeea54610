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
