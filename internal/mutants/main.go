// Command mutants applies a curated list of plausible mutants of idem's
// production code, one at a time, and runs the tests that should catch each.
// A mutant that no test fails on is a survivor: a change to the protocol the
// suites would let ship.
//
// Mutants never touch the work tree: each is compiled through `go test
// -overlay`, which replaces one file's text for the build only, so several
// runs (and an editor) can share the checkout.
//
//	go run ./internal/mutants [-list scripts/mutants.txt] [-run REGEXP] [-timeout 6m] [-report FILE]
//	                          [-check] [-whole] [-baseline]
//
// Each mutant ends killed (a test failed; it fails again on a second run
// with the mutant and passes three times without it), SURVIVED, flaky (the failing
// test did not fail twice with the mutant, or failed without it), invalid
// (its text is not found once, or the package or its tests do not build)
// or timeout. -check only checks that every mutant applies and type-checks
// (seconds, no test runs): CI runs it.
//
// scripts/mutants.sh starts the servers the store mutants' tests need and
// runs it. The list's format is documented in scripts/mutants.txt.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// A mutant is one change to one file.
type mutant struct {
	Name string
	File string   // relative to the module root
	From string   // text that occurs exactly once in File
	To   string   // what replaces it
	Pkgs []string // packages whose tests must fail
	Run  string   // optional -run filter for those tests
	Line int      // the line of the list it starts on
}

// result is what running one mutant's tests gave.
type result struct {
	Mutant mutant
	// Status is "killed" (a test failed, and passes without the mutant),
	// "SURVIVED", "flaky" (the failing test fails without the mutant too),
	// "invalid" (does not apply or build), "timeout", or, with -check,
	// "applies".
	Status   string
	KilledBy string // the first failing test and its first log line, or why invalid
	Seconds  float64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.String("list", "scripts/mutants.txt", "the mutant list")
	filter := fs.String("run", "", "run only the mutants whose name matches this regular expression")
	timeout := fs.Duration("timeout", 6*time.Minute, "how long one mutant's tests may take")
	report := fs.String("report", "", "also write the report (a Markdown table) to this file")
	check := fs.Bool("check", false, "only check that every mutant applies (its text occurs once) and type-checks, and that its packages exist")
	whole := fs.Bool("whole", false, "ignore the list's run: filters: run each mutant's packages whole (to confirm a survivor of a filtered run)")
	baseline := fs.Bool("baseline", false, "first run each mutant's tests unmutated; stop if they fail (a flaky test would kill mutants it never looked at)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mutants: unexpected arguments %q\n", fs.Args())
		return 2
	}
	data, err := os.ReadFile(*list)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ms, err := parseList(*list, string(data))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var re *regexp.Regexp
	if *filter != "" {
		if re, err = regexp.Compile(*filter); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	tmp, err := os.MkdirTemp("", "mutants")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	var selected []mutant
	for _, m := range ms {
		if *whole {
			m.Run = ""
		}
		if re == nil || re.MatchString(m.Name) {
			selected = append(selected, m)
		}
	}
	// Every selected mutant is checked first (one `go list`, then a type
	// check of each mutated package in process: seconds for the whole
	// list), so that a list that no longer applies fails at once.
	checked, err := checkAll(ctx, selected)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *baseline && !*check {
		if err := runBaseline(ctx, selected, *timeout, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}

	var results []result
	bad := 0
	for i, r := range checked {
		if r.Status == "applies" && !*check {
			r = runMutant(ctx, r.Mutant, filepath.Join(tmp, fmt.Sprint(i)), *timeout)
		}
		results = append(results, r)
		fmt.Fprintf(stdout, "%-9s %-44s %6.1fs  %s\n", r.Status, r.Mutant.Name, r.Seconds, r.KilledBy)
		if *report != "" && !*check {
			// Written as it goes: a long run stopped midway keeps its results.
			_ = os.WriteFile(*report, []byte(reportTable(results, false)), 0o644)
		}
		if r.Status != "killed" && !(*check && r.Status == "applies") {
			bad++
		}
	}
	text := reportTable(results, *check)
	fmt.Fprint(stdout, "\n"+text)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(text), 0o644); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "%d of %d mutants not killed\n", bad, len(results))
		return 1
	}
	return 0
}

// parseList reads blocks separated by blank lines; each line of a block is
// "field: value", "#" starts a comment line. Fields: name, file, from, to,
// pkgs (space-separated), run. In from and to, "\n" and "\t" stand for a
// newline and a tab, and "\\" for a backslash.
func parseList(path, text string) ([]mutant, error) {
	var ms []mutant
	var cur *mutant
	names := map[string]int{}
	flush := func() error {
		if cur == nil {
			return nil
		}
		m := *cur
		cur = nil
		switch {
		case m.Name == "", m.File == "", m.From == "", len(m.Pkgs) == 0:
			return fmt.Errorf("%s:%d: a mutant needs name, file, from and pkgs", path, m.Line)
		case m.From == m.To:
			return fmt.Errorf("%s:%d: mutant %s changes nothing", path, m.Line, m.Name)
		}
		if l, ok := names[m.Name]; ok {
			return fmt.Errorf("%s:%d: mutant %s already named at line %d", path, m.Line, m.Name, l)
		}
		names[m.Name] = m.Line
		ms = append(ms, m)
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		field, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"field: value\"", path, i+1)
		}
		value = strings.TrimPrefix(value, " ")
		if cur == nil {
			cur = &mutant{Line: i + 1}
		}
		switch field {
		case "name":
			cur.Name = value
		case "file":
			cur.File = value
		case "from":
			cur.From = unescape(value)
		case "to":
			cur.To = unescape(value)
		case "pkgs":
			cur.Pkgs = strings.Fields(value)
		case "run":
			cur.Run = value
		default:
			return nil, fmt.Errorf("%s:%d: unknown field %q", path, i+1, field)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return ms, nil
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runMutant writes the mutated file and an overlay that points the build at
// it, then runs the mutant's tests. A mutant whose tests do not build is
// invalid: only a test that runs and fails kills a mutant.
func runMutant(ctx context.Context, m mutant, dir string, timeout time.Duration) (r result) {
	r.Mutant = m
	start := time.Now()
	defer func() { r.Seconds = time.Since(start).Seconds() }()
	mutated, err := m.apply()
	if err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}
	abs, err := filepath.Abs(m.File)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}
	mfile := filepath.Join(dir, filepath.Base(m.File))
	overlay := filepath.Join(dir, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mfile}})
	if err := errors.Join(os.WriteFile(mfile, mutated, 0o644), os.WriteFile(overlay, ov, 0o644)); err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}

	// First with -failfast (a kill usually ends early); when no failing
	// test of that run is confirmed, once more without it, so that a
	// timing test failing first under load hides no real kill.
	var why []string
	for _, failfast := range []bool{true, false} {
		flags := []string{"-count=1", "-overlay=" + overlay}
		if failfast {
			flags = append(flags, "-failfast")
		}
		out, timedOut, err := goTest(ctx, timeout, m, flags...)
		switch {
		case timedOut:
			r.Status, r.KilledBy = "timeout", fmt.Sprintf("tests still running after %v", timeout)
			return r
		case err == nil && why == nil:
			r.Status = "SURVIVED"
			return r
		case err == nil:
			r.Status, r.KilledBy = "SURVIVED", "every test passed on a second run; the first: "+strings.Join(why, "; ")
			return r
		case testsDidNotBuild(out):
			// The package builds but its tests do not: the mutant changed
			// something the tests name, which proves nothing about them.
			r.Status, r.KilledBy = "invalid", "tests do not build: "+firstLine(out)
			return r
		}
		fs := failingTests(out)
		if len(fs) == 0 { // a panic, a test binary that timed out
			r.Status, r.KilledBy = "killed", firstFailure(out)
			return r
		}
		if f, ok := confirm(ctx, timeout, overlay, fs, &why); ok {
			r.Status, r.KilledBy = "killed", f.test
			if f.msg != "" {
				r.KilledBy += ": " + f.msg
			}
			return r
		}
	}
	r.Status, r.KilledBy = "flaky", strings.Join(why, "; ")
	return r
}

// confirm returns the first of the failing tests fs (up to
// maxConfirmations) that fails again when run alone with the mutant and
// passes three times without it: a test that fails under load would
// otherwise kill mutants it never looked at. why gets the reason each
// other test did not count.
func confirm(ctx context.Context, timeout time.Duration, overlay string, fs []failure, why *[]string) (failure, bool) {
	for i, f := range fs {
		if i == maxConfirmations {
			break
		}
		again := mutant{Pkgs: []string{f.pkg}, Run: runPattern(f.test)}
		if _, timedOut, err := goTest(ctx, timeout, again, "-count=1", "-overlay="+overlay); err == nil && !timedOut {
			*why = append(*why, f.test+" passes on a second run with the mutant")
		} else if _, timedOut, err := goTest(ctx, timeout, again, "-count=3"); err != nil || timedOut {
			*why = append(*why, f.test+" fails without the mutant too")
		} else {
			return f, true
		}
	}
	return failure{}, false
}

// maxConfirmations bounds how many failing tests are tried in turn to
// confirm a kill.
const maxConfirmations = 3

// failure is one failing (sub)test in go test's output.
type failure struct{ pkg, test, msg string }

// failingTests returns the failing tests of go test's output, deepest
// names only (the subtests that failed, not their parents), in order.
func failingTests(out string) []failure {
	m := failRE.FindAllStringSubmatchIndex(out, -1)
	var fs []failure
	for i, x := range m {
		name := out[x[2]:x[3]]
		if i+1 < len(m) && strings.HasPrefix(out[m[i+1][2]:m[i+1][3]], name+"/") {
			continue // a parent: its failing subtest follows
		}
		f := failure{test: name}
		if msg := strings.TrimSpace(lineAfter(out, x[1])); msg != "" && !strings.HasPrefix(msg, "--- ") && !strings.HasPrefix(msg, "FAIL") {
			f.msg = clip(msg, 160)
		}
		// go test prints "FAIL\t<package>\t<seconds>" after its package's tests.
		for _, l := range strings.Split(out[x[0]:], "\n") {
			if w := strings.Fields(l); len(w) >= 2 && w[0] == "FAIL" {
				f.pkg = w[1]
				break
			}
		}
		if f.pkg != "" {
			fs = append(fs, f)
		}
	}
	return fs
}

// runPattern is the -run pattern that selects exactly the (sub)test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// goTest runs m's tests (with extra flags before the packages) and returns
// their output, the error, and whether they ran out of time.
func goTest(ctx context.Context, timeout time.Duration, m mutant, flags ...string) (out string, timedOut bool, err error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append([]string{"test"}, flags...)
	if m.Run != "" {
		args = append(args, "-run", m.Run)
	}
	cmd := exec.CommandContext(tctx, "go", append(args, m.Pkgs...)...)
	cmd.WaitDelay = 10 * time.Second
	b, err := cmd.CombinedOutput()
	return string(b), tctx.Err() != nil, err
}

// runBaseline runs the tests of every distinct (packages, filter) of ms
// unmutated, and fails if any fails: a test that fails without a mutant
// would be reported as killing every mutant it runs for.
func runBaseline(ctx context.Context, ms []mutant, timeout time.Duration, stdout io.Writer) error {
	seen := map[string]bool{}
	for _, m := range ms {
		k := strings.Join(m.Pkgs, " ") + " -run " + m.Run
		if seen[k] {
			continue
		}
		seen[k] = true
		start := time.Now()
		out, timedOut, err := goTest(ctx, timeout, m, "-count=1")
		fmt.Fprintf(stdout, "baseline  %-44s %6.1fs  %s\n", k, time.Since(start).Seconds(), map[bool]string{true: "ok", false: "FAILED"}[err == nil])
		switch {
		case timedOut:
			return fmt.Errorf("baseline: %s: still running after %v", k, timeout)
		case err != nil:
			return fmt.Errorf("baseline: %s fails without any mutant (%s): fix or deflake it first", k, firstFailure(out))
		}
	}
	return nil
}

// testsDidNotBuild reports whether go test's output says a test binary
// could not be built or set up.
func testsDidNotBuild(out string) bool {
	return strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]")
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// firstFailure names the first failing test and quotes the first line it
// logged (so that a kill by a flaky test can be told from a real one), else
// the first FAIL line (a panic or a build failure of a test file).
func firstFailure(out string) string {
	if first, _, end := deepestFailure(out); first != "" {
		// The line after "--- FAIL: name (1.2s)" is the test's first log
		// line, unless the test logged nothing.
		if msg := strings.TrimSpace(lineAfter(out, end)); msg != "" && !strings.HasPrefix(msg, "--- ") && !strings.HasPrefix(msg, "FAIL") {
			return first + ": " + clip(msg, 160)
		}
		return first
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL") || strings.Contains(l, "panic:") {
			return strings.TrimSpace(l)
		}
	}
	return firstLine(out)
}

// deepestFailure returns the deepest name in the first tree of failing
// tests (the subtest that failed), where that tree's first "--- FAIL" line
// starts, and where the deepest name's line has its name end; "" when no
// test failed.
func deepestFailure(out string) (name string, start, end int) {
	m := failRE.FindAllStringSubmatchIndex(out, -1)
	if len(m) == 0 {
		return "", 0, 0
	}
	name, start, end = out[m[0][2]:m[0][3]], m[0][0], m[0][1]
	for _, x := range m[1:] {
		if n := out[x[2]:x[3]]; strings.HasPrefix(n, name+"/") {
			name, end = n, x[1]
		}
	}
	return name, start, end
}

// lineAfter returns the line after the one that ends at or after offset i.
func lineAfter(s string, i int) string {
	nl := strings.IndexByte(s[i:], '\n')
	if nl < 0 {
		return ""
	}
	l, _, _ := strings.Cut(s[i+nl+1:], "\n")
	return l
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

// reportTable is the report as a Markdown table; with check, of a -check run.
func reportTable(rs []result, check bool) string {
	var b strings.Builder
	want, verb := "killed", "killed"
	if check {
		want, verb = "applies", "apply and type-check"
	}
	n := 0
	for _, r := range rs {
		if r.Status == want {
			n++
		}
	}
	fmt.Fprintf(&b, "%d of %d mutants %s.\n\n", n, len(rs), verb)
	b.WriteString("| mutant | file | result | killed by | seconds |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		by := strings.ReplaceAll(r.KilledBy, "|", `\|`)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f |\n", r.Mutant.Name, r.Mutant.File, r.Status, by, r.Seconds)
	}
	return b.String()
}

// apply returns the text of m.File with the mutant applied.
func (m mutant) apply() ([]byte, error) {
	src, err := os.ReadFile(m.File)
	if err != nil {
		return nil, err
	}
	if n := bytes.Count(src, []byte(m.From)); n != 1 {
		return nil, fmt.Errorf("%q occurs %d times in %s, want once", m.From, n, m.File)
	}
	return bytes.Replace(src, []byte(m.From), []byte(m.To), 1), nil
}

// checkAll checks every mutant without running a test: its text occurs
// once, the package it mutates type-checks with it (against the export
// data of its dependencies), and the packages named to kill it exist.
// Each result is "applies" or "invalid" with the reason.
func checkAll(ctx context.Context, ms []mutant) ([]result, error) {
	var dirs, pkgs []string
	for _, m := range ms {
		dirs = append(dirs, "./"+filepath.ToSlash(filepath.Dir(filepath.Clean(m.File))))
		pkgs = append(pkgs, m.Pkgs...)
	}
	slices.Sort(dirs)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	l, err := newLoader(ctx, slices.Compact(dirs))
	if err != nil {
		return nil, err
	}
	missing, err := listErrors(ctx, pkgs)
	if err != nil {
		return nil, err
	}
	rs := make([]result, len(ms))
	for i, m := range ms {
		start := time.Now()
		rs[i] = result{Mutant: m, Status: "applies"}
		err := l.check(m)
		for _, p := range m.Pkgs {
			if e := missing[p]; e != "" && err == nil {
				err = fmt.Errorf("package %s: %s", p, e)
			}
		}
		if err != nil {
			rs[i].Status, rs[i].KilledBy = "invalid", err.Error()
		}
		rs[i].Seconds = time.Since(start).Seconds()
	}
	return rs, nil
}

// goList runs `go list -e -json=FIELDS args...` and decodes its packages.
func goList(ctx context.Context, fields string, args ...string) ([]listedPackage, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-e", "-json=" + fields}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var ps []listedPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			return ps, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		ps = append(ps, p)
	}
}

// listedPackage is what `go list -json` says of a package.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	ImportMap  map[string]string
	Match      []string
	Error      *struct{ Err string }
}

// listErrors maps each of pkgs (patterns as the list spells them) that go
// list cannot load to its error.
func listErrors(ctx context.Context, pkgs []string) (map[string]string, error) {
	ps, err := goList(ctx, "ImportPath,Match,Error", pkgs...)
	if err != nil {
		return nil, err
	}
	bad := map[string]string{}
	found := map[string]bool{}
	for _, p := range ps {
		for _, m := range p.Match {
			found[m] = true
			if p.Error != nil {
				bad[m] = p.Error.Err
			}
		}
	}
	// go list reports the pattern cleaned ("./runtime" for "./runtime/").
	out := map[string]string{}
	for _, p := range pkgs {
		q := strings.TrimSuffix(p, "/")
		switch {
		case !found[q]:
			out[p] = "matches no package"
		case bad[q] != "":
			out[p] = bad[q]
		}
	}
	return out, nil
}

// loader type-checks a package with one file replaced, importing its
// dependencies from the export data `go list -export` leaves in the build
// cache.
type loader struct {
	fset   *token.FileSet
	byDir  map[string]*listedPackage
	export map[string]string // import path -> export data file
	parsed map[string]*ast.File
	imp    types.ImporterFrom
}

func newLoader(ctx context.Context, dirs []string) (*loader, error) {
	ps, err := goList(ctx, "ImportPath,Dir,GoFiles,Export,ImportMap,Match,Error", append([]string{"-export", "-deps"}, dirs...)...)
	if err != nil {
		return nil, err
	}
	l := &loader{fset: token.NewFileSet(), byDir: map[string]*listedPackage{}, export: map[string]string{}, parsed: map[string]*ast.File{}}
	for i := range ps {
		p := &ps[i]
		if len(p.Match) > 0 {
			l.byDir[p.Dir] = p
		}
		if p.Export != "" {
			l.export[p.ImportPath] = p.Export
		}
	}
	l.imp = importer.ForCompiler(l.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := l.export[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}).(types.ImporterFrom)
	return l, nil
}

// check applies m and type-checks the package it mutates.
func (l *loader) check(m mutant) error {
	src, err := m.apply()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(m.File)
	if err != nil {
		return err
	}
	p := l.byDir[filepath.Dir(abs)]
	switch {
	case p == nil:
		return fmt.Errorf("%s is in no package go list knows", m.File)
	case p.Error != nil:
		return fmt.Errorf("package %s: %s", p.ImportPath, p.Error.Err)
	case !slices.Contains(p.GoFiles, filepath.Base(m.File)):
		return fmt.Errorf("%s is not one of the Go files package %s builds", m.File, p.ImportPath)
	}
	files := make([]*ast.File, 0, len(p.GoFiles))
	for _, name := range p.GoFiles {
		path := filepath.Join(p.Dir, name)
		if path == abs {
			// Named as the list names it, so errors read file:line:col.
			f, err := parser.ParseFile(l.fset, m.File, src, parser.SkipObjectResolution)
			if err != nil {
				return fmt.Errorf("does not build: %w", err)
			}
			files = append(files, f)
			continue
		}
		f := l.parsed[path]
		if f == nil {
			if f, err = parser.ParseFile(l.fset, path, nil, parser.SkipObjectResolution); err != nil {
				return err
			}
			l.parsed[path] = f
		}
		files = append(files, f)
	}
	var first error
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if mapped, ok := p.ImportMap[path]; ok {
				path = mapped
			}
			return l.imp.ImportFrom(path, p.Dir, 0)
		}),
		Error: func(err error) {
			if first == nil {
				first = err
			}
		},
	}
	_, _ = conf.Check(p.ImportPath, l.fset, files, nil)
	if first != nil {
		return fmt.Errorf("does not build: %w", first)
	}
	return nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
