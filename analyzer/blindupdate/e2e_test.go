package blindupdate_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/blindupdate"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestMain(m *testing.M) { ruletest.Main(m, blindupdate.Analyzer) }

// TestEndToEnd runs the rule as a command: this test binary doubles as a
// multichecker of it (as cmd/idemlint is one of the suite), directly and
// as go vet -vettool.
func TestEndToEnd(t *testing.T) {
	ruletest.EndToEnd(t, analysistest.TestData(), blindupdate.Name,
		`bad.go:10:12: (*sql.DB).ExecContext (called at bad.go:10:12) runs "UPDATE orders SET status = 'PAID' WHERE id = $1", a state transition without compare-and-set`)
}

// TestJSON compares the -json output on the rule's cases with
// testdata/json.golden (go test -update rewrites it).
func TestJSON(t *testing.T) {
	ruletest.JSON(t, analysistest.TestData(), "bu", "bucaller", "busqlc")
}
