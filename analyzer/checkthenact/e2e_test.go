package checkthenact_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/checkthenact"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestMain(m *testing.M) { ruletest.Main(m, checkthenact.Analyzer) }

// TestEndToEnd runs the rule as a command (this test binary doubles as a
// multichecker of it, as cmd/idemlint is one of the suite).
func TestEndToEnd(t *testing.T) {
	td := analysistest.TestData()
	_, stderr, code := ruletest.Run(t, td, "e2e/bad")
	if code != 3 || !strings.Contains(stderr, `bad.go:13:10: (redis.cmdable).Set writes the idempotency key "idem:" + key without NX on the not-found path`) {
		t.Errorf("bad: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "e2e/good"); code != 0 || stderr != "" {
		t.Errorf("good: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "-checkthenact=false", "e2e/bad"); code != 0 {
		t.Errorf("-checkthenact=false: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/bad"); code == 0 || !strings.Contains(stderr, "without NX on the not-found path") {
		t.Errorf("go vet -vettool: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/good"); code != 0 {
		t.Errorf("go vet -vettool on good: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestJSON compares the -json output on the rule's cases with a golden file.
func TestJSON(t *testing.T) {
	td := analysistest.TestData()
	stdout, stderr, code := ruletest.Run(t, td, "-json", "-checkthenact.tables=request_log", "ct", "ctcfg")
	if code != 0 {
		t.Fatalf("-json: exit %d, stderr:\n%s", code, stderr)
	}
	ruletest.Golden(t, td, "testdata/json.golden", stdout)
}
