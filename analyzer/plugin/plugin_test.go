package plugin_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	_ "github.com/idemkit/idem/analyzer/plugin"
)

func build(t *testing.T, settings any) ([]*analysis.Analyzer, error) {
	t.Helper()
	newPlugin, err := register.GetPlugin("idemlint")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlugin(settings)
	if err != nil {
		return nil, err
	}
	if p.GetLoadMode() != register.LoadModeTypesInfo {
		t.Errorf("load mode %q", p.GetLoadMode())
	}
	return p.BuildAnalyzers()
}

func TestPluginSettings(t *testing.T) {
	as, err := build(t, map[string]any{
		"disable":   []any{"tokenorder", "blindupdate", "checkthenact", "serverkey", "bypass"},
		"netfuncs":  []any{"(example.com/pay.Gateway).Charge"},
		"txrunners": []any{"example.com/db.WithTx"},
		"tables":    []any{"request_log"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range as {
		names = append(names, a.Name)
	}
	if got := strings.Join(names, ","); got != "txrpc,timeoutfail" {
		t.Errorf("analyzers = %s, want txrpc,timeoutfail", got)
	}
	if err := analysis.Validate(as); err != nil {
		t.Errorf("analyzers do not validate together: %v", err)
	}
	// Both rules read the same facts analyzer, configured from the settings.
	fa := as[0].Requires[0]
	if as[1].Requires[0] != fa {
		t.Errorf("rules do not share the facts analyzer")
	}
	if v := fa.Flags.Lookup("netfuncs").Value.String(); v != "(example.com/pay.Gateway).Charge" {
		t.Errorf("netfuncs = %q", v)
	}
	if v := fa.Flags.Lookup("tables").Value.String(); v != "request_log" {
		t.Errorf("tables = %q", v)
	}
}

func TestPluginBadSettings(t *testing.T) {
	if _, err := build(t, map[string]any{"netfunc": []any{"x"}}); err == nil {
		t.Error("unknown setting accepted")
	}
	if _, err := build(t, map[string]any{"disable": []any{"nosuchrule"}}); err == nil {
		t.Error("unknown rule accepted")
	}
	as, err := build(t, nil)
	if err != nil || len(as) != 7 {
		t.Errorf("nil settings: %d analyzers, %v", len(as), err)
	}
}

// TestPluginNoRelated: inside golangci-lint each related position would
// become an issue of its own, so the plugin's diagnostics carry none; the
// message names the positions instead.
func TestPluginNoRelated(t *testing.T) {
	as, err := build(t, map[string]any{"disable": []any{"timeoutfail", "tokenorder"}})
	if err != nil {
		t.Fatal(err)
	}
	testdata := filepath.Join(analysistest.TestData(), "..", "..", "testdata")
	results := analysistest.Run(&quiet{T: t}, testdata, as[0], "a")
	n := 0
	for _, r := range results {
		for _, d := range r.Diagnostics {
			n++
			if len(d.Related) > 0 {
				t.Errorf("%s: related positions %v", d.Message, d.Related)
			}
			if !strings.Contains(d.Message, " at ") && !strings.HasPrefix(d.Message, "idemlint:ignore") {
				t.Errorf("message names no position: %s", d.Message)
			}
		}
	}
	if n == 0 {
		t.Fatal("no diagnostics")
	}
}

// quiet ignores analysistest's expectation errors (the want comments of
// package a are checked by txrpc's own tests).
type quiet struct{ *testing.T }

func (q *quiet) Errorf(string, ...any) {}
