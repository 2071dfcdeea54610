package bypass_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestMain(m *testing.M) { ruletest.Main(m, bypass.Analyzer) }

// TestEndToEnd runs the rule as a command: this test binary doubles as a
// multichecker of it (as cmd/idemlint is one of the suite), directly and
// as go vet -vettool.
func TestEndToEnd(t *testing.T) {
	ruletest.EndToEnd(t, analysistest.TestData(), bypass.Name,
		`bad.go:12:12: (*bpimpl.Service).Charge is called at bad.go:12:12 on the concrete *bpimpl.Service, which implements the //idem:service bpsvc.Payments`)
}

// TestJSON compares the -json output on the rule's cases with
// testdata/json.golden (go test -update rewrites it).
func TestJSON(t *testing.T) {
	ruletest.JSON(t, analysistest.TestData(), "bp", "bpimpl")
}
