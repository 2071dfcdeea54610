package bypass_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/bypass"
)

func TestBypass(t *testing.T) {
	results := analysistest.Run(t, analysistest.TestData(), bypass.New(bypass.Config{}), "bp", "bpimpl")
	n := 0
	for _, r := range results {
		for _, d := range r.Diagnostics {
			if strings.HasPrefix(d.Message, "idemlint:ignore") {
				continue
			}
			n++
			if d.End <= d.Pos || len(d.Related) == 0 {
				t.Errorf("%v: End %v, related %v", r.Pass.Fset.Position(d.Pos), d.End, d.Related)
			}
			for _, rel := range d.Related {
				if !rel.Pos.IsValid() || rel.Pos == d.Pos {
					t.Errorf("%v: bad related position %+v", r.Pass.Fset.Position(d.Pos), rel)
				}
			}
		}
	}
	if n < 12 {
		t.Errorf("%d findings, want at least 12", n)
	}
}

func TestBypassFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), bypass.New(bypass.Config{}), "bpfix")
}
