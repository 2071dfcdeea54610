package plugin_test

import (
	"strings"
	"testing"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

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
