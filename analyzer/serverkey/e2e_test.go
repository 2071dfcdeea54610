package serverkey_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/serverkey"
)

func TestMain(m *testing.M) { ruletest.Main(m, serverkey.Analyzer) }

// TestEndToEnd runs the rule as a command (this test binary doubles as a
// multichecker of it, as cmd/idemlint is one of the suite).
func TestEndToEnd(t *testing.T) {
	td := analysistest.TestData()
	_, stderr, code := ruletest.Run(t, td, "e2e/bad")
	if code != 3 || !strings.Contains(stderr, `bad.go:13:3: the Idempotency-Key header is set from uuid.NewString() inside a retry loop`) {
		t.Errorf("bad: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "e2e/good"); code != 0 || stderr != "" {
		t.Errorf("good: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "-serverkey=false", "e2e/bad"); code != 0 {
		t.Errorf("-serverkey=false: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/bad"); code == 0 || !strings.Contains(stderr, "inside a retry loop") {
		t.Errorf("go vet -vettool: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/good"); code != 0 {
		t.Errorf("go vet -vettool on good: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestJSON compares the -json output on the rule's cases with a golden file.
func TestJSON(t *testing.T) {
	td := analysistest.TestData()
	stdout, stderr, code := ruletest.Run(t, td, "-json", "sk")
	if code != 0 {
		t.Fatalf("-json: exit %d, stderr:\n%s", code, stderr)
	}
	ruletest.Golden(t, td, "testdata/json.golden", stdout)
}
