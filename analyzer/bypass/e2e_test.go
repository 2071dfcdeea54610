package bypass_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/bypass"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

func TestMain(m *testing.M) { ruletest.Main(m, bypass.Analyzer) }

// TestEndToEnd runs the rule as a command (this test binary doubles as a
// multichecker of it, as cmd/idemlint is one of the suite).
func TestEndToEnd(t *testing.T) {
	td := analysistest.TestData()
	_, stderr, code := ruletest.Run(t, td, "e2e/bad")
	if code != 3 || !strings.Contains(stderr, `bad.go:12:12: (*bpimpl.Service).Charge is called on the concrete *bpimpl.Service, which implements the //idem:service bpsvc.Payments`) {
		t.Errorf("bad: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "e2e/good"); code != 0 || stderr != "" {
		t.Errorf("good: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, code = ruletest.Run(t, td, "-bypass=false", "e2e/bad"); code != 0 {
		t.Errorf("-bypass=false: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/bad"); code == 0 || !strings.Contains(stderr, "skips the generated wrapper") {
		t.Errorf("go vet -vettool: exit %d, stderr:\n%s", code, stderr)
	}
	if stderr, code := ruletest.Vet(t, td, "e2e/good"); code != 0 {
		t.Errorf("go vet -vettool on good: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestJSON compares the -json output on the rule's cases with a golden file.
func TestJSON(t *testing.T) {
	td := analysistest.TestData()
	stdout, stderr, code := ruletest.Run(t, td, "-json", "bp", "bpimpl")
	if code != 0 {
		t.Fatalf("-json: exit %d, stderr:\n%s", code, stderr)
	}
	ruletest.Golden(t, td, "testdata/json.golden", stdout)
}
