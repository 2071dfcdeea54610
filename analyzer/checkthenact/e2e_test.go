package checkthenact_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestMain(m *testing.M) { ruletest.Main(m, checkthenact.Analyzer) }

// TestEndToEnd runs the rule as a command: this test binary doubles as a
// multichecker of it (as cmd/idemlint is one of the suite), directly and
// as go vet -vettool.
func TestEndToEnd(t *testing.T) {
	ruletest.EndToEnd(t, analysistest.TestData(), checkthenact.Name,
		`bad.go:13:10: (redis.cmdable).Set writes the idempotency key "idem:" + key without NX on the not-found path`)
}

// TestJSON compares the -json output on the rule's cases with
// testdata/json.golden (go test -update rewrites it).
func TestJSON(t *testing.T) {
	ruletest.JSON(t, analysistest.TestData(), "-checkthenact.tables=request_log", "ct", "ctcfg")
}
