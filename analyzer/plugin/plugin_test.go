package plugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

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
// message names the positions instead. It reads txrpc's findings on its
// cases (package a of the analyzers' shared testdata) in the one analysis
// of the default suite that TestPluginDefaultFilters reads too.
func TestPluginNoRelated(t *testing.T) {
	n := 0
	for _, r := range analyzed(t) {
		if r.Analyzer.Name != "txrpc" || r.Package.PkgPath != "a" {
			continue
		}
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

var (
	analyzeOnce sync.Once
	roots       []*checker.Action
)

// analyzed returns the root actions of one load and one analysis of every
// rule of the plugin's default settings, as golangci-lint runs them, on rep
// (this package's testdata) and a (txrpc's cases in the analyzers' shared
// testdata), both GOPATHs at once: each load type-checks net/http and the
// rest from source, so the two tests share one.
func analyzed(t *testing.T) []*checker.Action {
	t.Helper()
	analyzeOnce.Do(func() {
		as, err := build(t, nil)
		if err != nil {
			t.Fatal(err)
		}
		testdata := analysistest.TestData()
		shared := filepath.Join(testdata, "..", "..", "testdata")
		pkgs, err := packages.Load(&packages.Config{
			Mode: packages.LoadAllSyntax,
			Dir:  filepath.Join(testdata, "src", "rep"),
			Env:  append(os.Environ(), "GOPATH="+testdata+string(filepath.ListSeparator)+shared, "GO111MODULE=off", "GOPROXY=off", "GOFLAGS="),
		}, "rep", "a")
		if err != nil || packages.PrintErrors(pkgs) > 0 {
			t.Fatalf("loading rep and a: %v", err)
		}
		graph, err := checker.Analyze(as, pkgs, nil)
		if err != nil {
			t.Fatal(err)
		}
		roots = graph.Roots
	})
	if roots == nil {
		t.Fatal("the analysis failed (see the first test that ran it)")
	}
	return roots
}

// issue is a golangci-lint issue: the linter, its text and its line.
type issue struct {
	text string
	file string
	line int
}

// golangciIssues turns diagnostics into issues as golangci-lint v2.15.0
// does (pkg/goanalysis/runners.go, buildIssues): the text of a diagnostic
// of analyzer A in linter idemlint is "A: message", and each related
// position becomes an issue of its own, "A(related information): message".
func golangciIssues(roots []*checker.Action) []issue {
	var out []issue
	for _, r := range roots {
		fset := r.Package.Fset
		for _, d := range r.Diagnostics {
			p := fset.Position(d.Pos)
			out = append(out, issue{r.Analyzer.Name + ": " + d.Message, p.Filename, p.Line})
			for _, rel := range d.Related {
				rp := fset.Position(rel.Pos)
				if rp.Filename != p.Filename {
					rp = p
				}
				out = append(out, issue{r.Analyzer.Name + "(related information): " + rel.Message, rp.Filename, rp.Line})
			}
		}
	}
	return out
}

// defaultFilters applies golangci-lint v2.15.0's default issue filters in
// its order (pkg/lint/runner.go): uniq-by-line (one issue per line),
// max-same-issues 3 (per text), max-issues-per-linter 50.
func defaultFilters(issues []issue) []issue {
	lines := map[string]bool{}
	same := map[string]int{}
	var out []issue
	for _, is := range issues {
		key := is.file + ":" + strconv.Itoa(is.line)
		if lines[key] {
			continue
		}
		lines[key] = true
		if same[is.text]++; same[is.text] > 3 {
			continue
		}
		if len(out) == 50 {
			continue
		}
		out = append(out, is)
	}
	return out
}

// TestPluginDefaultFilters: with golangci-lint's default issue filters,
// every finding of a package that repeats one finding of each of
// blindupdate, checkthenact, serverkey and bypass six times in identical
// code is shown, once: the plugin reports no related positions (each would
// be an issue of its own, counted against the 50) and every message names
// its position (identical text would be capped at 3).
//
// It checks the plugin through golangci-lint's plugin API (register), and
// the filters' semantics as golangci-lint v2.15.0 implements them, not a
// custom golangci-lint binary: building one takes longer than the tests'
// budget (see docs/idemlint.md for building it).
func TestPluginDefaultFilters(t *testing.T) {
	// One load and one analysis for all rules, as golangci-lint runs them.
	var rep []*checker.Action
	for _, r := range analyzed(t) {
		if r.Package.PkgPath == "rep" {
			rep = append(rep, r)
		}
	}
	perRule := map[string]int{}
	var findings int
	for _, r := range rep {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.Analyzer.Name, r.Err)
		}
		perRule[r.Analyzer.Name] += len(r.Diagnostics)
		findings += len(r.Diagnostics)
	}
	for _, rule := range []string{"blindupdate", "checkthenact", "serverkey", "bypass"} {
		if perRule[rule] != 6 {
			t.Errorf("%s: %d findings, want 6", rule, perRule[rule])
		}
	}
	issues := golangciIssues(rep)
	shown := defaultFilters(issues)
	main := 0
	for _, is := range shown {
		if !strings.Contains(is.text, "(related information)") {
			main++
		}
	}
	if len(issues) != findings || len(shown) != findings || main != findings {
		t.Errorf("%d findings became %d golangci-lint issues, %d shown by the default filters; want every finding shown once", findings, len(issues), len(shown))
		for _, is := range issues {
			t.Logf("%s:%d: %.120s", filepath.Base(is.file), is.line, is.text)
		}
	}
}
