package serverkey_test

import (
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/serverkey"
)

func TestServerkey(t *testing.T) {
	results := analysistest.Run(t, analysistest.TestData(), serverkey.New(serverkey.Config{}), "sk")
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

func TestServerkeyFix(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), serverkey.New(serverkey.Config{}), "skfix")
}
