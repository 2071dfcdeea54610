package ruletest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
)

// Shared is one analysistest run shared by the tests of a rule that use the
// same analyzer configuration on different packages: each analysistest.Run
// loads and type-checks every dependency from source (net/http and its
// closure, the real libraries of the module-mode testdata), so one load of
// all the packages costs a fraction of one load per test.
//
// The first test to call Results runs the analyzer on every package of the
// set (analysistest.RunWithSuggestedFixes when Fix is set, whose golden
// files are then checked for every package with a fix); each test then
// fails on the errors of its own packages (a want not matched, an
// unexpected diagnostic, a fix that differs from its golden file) and on
// the errors that name no package of the set (a load that failed), and
// gets the results of its packages only.
type Shared struct {
	// Dir is the GOPATH (or the module directory) the packages are loaded
	// from, as for analysistest.Run.
	Dir string
	// Analyzer builds the analyzer; it is called once.
	Analyzer func() *analysis.Analyzer
	// Patterns are the packages of every test of the set, as given to
	// analysistest.Run: import paths in GOPATH mode, ./dir/... in module mode.
	Patterns []string
	// Fix checks the suggested fixes against the .golden files.
	Fix bool

	once    sync.Once
	results []*analysistest.Result
	errs    []string
}

// Results returns the results of the shared run for patterns (a subset of
// Patterns) and reports to t the errors that belong to them.
func (s *Shared) Results(t *testing.T, patterns ...string) []*analysistest.Result {
	t.Helper()
	for _, p := range patterns {
		if !slices.Contains(s.Patterns, p) {
			t.Fatalf("pattern %q is not in the shared run's %q", p, s.Patterns)
		}
	}
	s.once.Do(func() {
		rec := &recorder{TB: t}
		if s.Fix {
			s.results = analysistest.RunWithSuggestedFixes(rec, s.Dir, s.Analyzer(), s.Patterns...)
		} else {
			s.results = analysistest.Run(rec, s.Dir, s.Analyzer(), s.Patterns...)
		}
		s.errs = rec.errs
	})
	mine, all := mentioner(patterns), mentioner(s.Patterns)
	for _, e := range s.errs {
		if mine.MatchString(e) || !all.MatchString(e) {
			t.Error(e)
		}
	}
	dirs := s.dirs(patterns)
	var out []*analysistest.Result
	for _, r := range s.results {
		if r.Action != nil && r.Action.Package != nil && slices.ContainsFunc(r.Action.Package.CompiledGoFiles, func(f string) bool {
			return slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(f, d) })
		}) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Errorf("no results for %q", patterns)
	}
	return out
}

// dirs returns the directories of patterns' packages, each ending in a
// separator.
func (s *Shared) dirs(patterns []string) []string {
	var dirs []string
	for _, p := range patterns {
		if rest, ok := strings.CutPrefix(p, "./"); ok {
			dirs = append(dirs, filepath.Join(s.Dir, strings.TrimSuffix(rest, "/..."))+string(os.PathSeparator))
		} else {
			dirs = append(dirs, filepath.Join(s.Dir, "src", p)+string(os.PathSeparator))
		}
	}
	return dirs
}

// mentioner matches a text that names a file of patterns' packages, as
// analysistest writes it: relative to the GOPATH's src (bu/bu.go:12),
// absolute, or relative to the test's directory (../testdata/src/bu/bu.go),
// a module's package by its directory (txrpc/gormtx/gorm.go).
func mentioner(patterns []string) *regexp.Regexp {
	var alts []string
	for _, p := range patterns {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/...")
		alts = append(alts, regexp.QuoteMeta(filepath.ToSlash(p)+"/"))
	}
	return regexp.MustCompile(`(^|[^A-Za-z0-9_.-])(` + strings.Join(alts, "|") + `)`)
}

// recorder keeps the errors of a shared run for the tests to report; the
// rest of testing.TB (logs of type errors, skips) is the first test's.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
