package serverkey_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/serverkey"
)

func TestMain(m *testing.M) { ruletest.Main(m, serverkey.Analyzer) }

// TestEndToEnd runs the rule as a command: this test binary doubles as a
// multichecker of it (as cmd/idemlint is one of the suite), directly and
// as go vet -vettool.
func TestEndToEnd(t *testing.T) {
	ruletest.EndToEnd(t, analysistest.TestData(), serverkey.Name,
		`bad.go:13:3: the Idempotency-Key header is set from uuid.NewString() at bad.go:13:37 inside a retry loop`)
}

// TestJSON compares the -json output on the rule's cases with
// testdata/json.golden (go test -update rewrites it).
func TestJSON(t *testing.T) {
	ruletest.JSON(t, analysistest.TestData(), "sk")
}
