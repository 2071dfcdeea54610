package analyzer_test

import (
	"testing"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer"
)

func TestSuite(t *testing.T) {
	def := analyzer.Analyzers()
	if err := analysis.Validate(def); err != nil {
		t.Fatalf("default analyzers: %v", err)
	}
	for i, a := range def {
		if a.Name != analyzer.Rules[i] {
			t.Errorf("analyzer %d is %q, want %q", i, a.Name, analyzer.Rules[i])
		}
		if a.Doc == "" || a.URL == "" {
			t.Errorf("%s: missing Doc or URL", a.Name)
		}
	}
	as, err := analyzer.New(analyzer.Settings{Disable: []string{"txrpc", "blindupdate", "checkthenact", "serverkey", "bypass"}, TokenTables: []string{"request_log"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Name != "timeoutfail" || as[1].Name != "tokenorder" {
		t.Errorf("suite = %v", as)
	}
	if err := analysis.Validate(as); err != nil {
		t.Errorf("suite: %v", err)
	}
	if as[0].Requires[0] == def[0].Requires[0] {
		t.Errorf("a configured suite shares the default facts analyzer")
	}
	if _, err := analyzer.New(analyzer.Settings{Disable: []string{"txrcp"}}); err == nil {
		t.Errorf("misspelled rule accepted")
	}
}
