package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer"
	"github.com/idemkit/idem/analyzer/facts"
)

// enable is a rule's -txrpc / -txrpc=false flag: unset, true or false.
type enable struct{ set, on bool }

func (e *enable) IsBoolFlag() bool { return true }
func (e *enable) String() string {
	if e == nil || !e.set {
		return ""
	}
	return strconv.FormatBool(e.on)
}
func (e *enable) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	e.set, e.on = true, v
	return nil
}

// run is the standalone driver: it loads the whole program once, runs a
// first facts pass that records what each concrete method does, then the
// rules with interface calls resolved through it.
func run(settings analyzer.Settings, args []string, stdout, stderr io.Writer) int {
	// Collect more often than Go's default (GOGC=100 lets the heap grow to
	// twice what is live): on pocketbase (120k lines) GOGC=50 took 21 s of
	// CPU and a 548 MB peak, against 18 s and 629 MB at 100 and 31 s and
	// 503 MB at 25 (go vet: 27 s, 751 MB). A GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	prog := facts.NewProgram()
	rules, f, err := analyzer.NewSuite(settings, facts.Config{Program: prog})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fs := flag.NewFlagSet("idemlint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "emit JSON output")
	asSARIF := fs.Bool("sarif", false, "emit SARIF 2.1.0 output (for GitHub code scanning)")
	tests := fs.Bool("test", true, "indicates whether test files should be analyzed, too")
	fs.Int("c", -1, "display offending line with this many lines of context (accepted for compatibility; ignored)")
	enabled := map[string]*enable{}
	for _, a := range rules {
		e := new(enable)
		enabled[a.Name] = e
		fs.Var(e, a.Name, "enable "+a.Name+" analysis")
		a.Flags.VisitAll(func(fl *flag.Flag) {
			fs.Var(fl.Value, a.Name+"."+fl.Name, fl.Usage)
		})
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "idemlint: idempotency rules (%s).\n\nUsage: idemlint [-flag] [package]\n       idemlint -version\n       idemlint lsp    (a language server on stdin and stdout, for editors: see docs/idemlint.md)\n\n", strings.Join(analyzer.Rules, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 1
	}
	if *asJSON && *asSARIF {
		fmt.Fprintln(stderr, "idemlint: -json and -sarif cannot be used together")
		return 1
	}
	rules = selectRules(rules, enabled)
	patterns := fs.Args()
	if len(patterns) == 0 {
		fs.Usage()
		return 1
	}

	debug := os.Getenv("IDEMLINT_DEBUG") != ""
	t0 := time.Now()
	lap := func(what string) {
		if debug {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(stderr, "idemlint: %s: %v (heap %d MB, %d GCs)\n", what, time.Since(t0).Round(time.Millisecond), ms.HeapAlloc>>20, ms.NumGC)
		}
		// IDEMLINT_MEMPROFILE=file writes file.<what>, the heap at each step.
		if path := os.Getenv("IDEMLINT_MEMPROFILE"); path != "" {
			if f, err := os.Create(path + "." + strings.ReplaceAll(what, " ", "-")); err == nil {
				runtime.GC()
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
	}
	if path := os.Getenv("IDEMLINT_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	// -json and -sarif list what the directives suppress, with their
	// reasons; the text output and the exit status ignore it.
	analyzer.KeepSuppressed(*asJSON || *asSARIF)
	res, err := lint(context.Background(), "", settings, prog, rules, f, patterns, *tests, stderr, lap)
	if err != nil {
		fmt.Fprintln(stderr, "idemlint:", err)
		return 1
	}
	if res.roots == 0 {
		fmt.Fprintf(stderr, "idemlint: no packages matched %v\n", patterns)
		return 1
	}
	loadErrs, notAnalyzed, findings := res.loadErrs, res.notAnalyzed, res.findings
	failed := len(loadErrs) > 0
	defer reportNotAnalyzed(stderr, notAnalyzed)
	if *asJSON || *asSARIF {
		print := func() error { return printJSON(stdout, findings, res.suppressed) }
		if *asSARIF {
			print = func() error { return printSARIF(stdout, rules, findings, res.suppressed, loadErrs) }
		}
		if err := print(); err != nil {
			fmt.Fprintln(stderr, "idemlint:", err)
			return 1
		}
		if failed {
			return 1
		}
		return 0
	}
	printText(stderr, findings)
	switch {
	case failed:
		return 1
	case len(findings) > 0:
		return 3
	}
	return 0
}

// lintResult is what one run of the standalone driver found.
type lintResult struct {
	roots       int // the packages the patterns matched
	findings    []finding
	suppressed  []finding         // what a //idemlint:ignore directive suppressed (-json, -sarif)
	loadErrs    []string          // "pos: message", each once
	notAnalyzed []string          // the named packages not analyzed, by ID
	dirs        map[string]string // package ID -> directory
	dir         string            // where go list ran ("" for the working directory)
}

// lint is the standalone driver's analysis, shared by the command and the
// language server: it lists the packages matching patterns in dir ("" for
// the working directory), runs a first facts pass that records what each
// concrete method does, then the rules with interface calls resolved
// through it. rules and f come from one analyzer.NewSuite over prog; the
// load errors are printed to stderr as they are found, and lap is called
// after each step.
func lint(ctx context.Context, dir string, settings analyzer.Settings, prog *facts.Program, rules []*analysis.Analyzer, f *facts.Facts, patterns []string, tests bool, stderr io.Writer, lap func(string)) (*lintResult, error) {
	pkgs, err := goList(ctx, dir, patterns, tests)
	if err != nil {
		return nil, err
	}
	return lintListed(pkgs, settings, prog, rules, f, stderr, lap, nil, "")
}

// lintListed is lint on the packages go list gave. With a cache (the
// language server's; its prog is prog), the first pass skips the
// packages whose first pass the cache keeps and leaves the cache what it
// learned of the others (see depCache); modCache is GOMODCACHE.
func lintListed(pkgs []*listed, settings analyzer.Settings, prog *facts.Program, rules []*analysis.Analyzer, f *facts.Facts, stderr io.Writer, lap func(string), cache *depCache, modCache string) (*lintResult, error) {
	// Packages that do not load (or import one that does not) are not
	// analyzed; the others are, as go vet would.
	loadErrs, notAnalyzed := loadErrors(pkgs)
	for _, e := range loadErrs {
		fmt.Fprintln(stderr, e)
	}
	roots := 0
	for _, p := range pkgs {
		if !p.DepOnly {
			roots++
		}
	}
	if roots == 0 {
		return &lintResult{loadErrs: loadErrs, notAnalyzed: notAnalyzed}, nil
	}
	lap("go list")

	// First pass: every package, the rules on the named ones, recording
	// the named packages' concrete types, what their methods do and which
	// interface methods they call.
	s1 := settings
	s1.NetFuncs, s1.TxRunners, s1.TokenTables = f.Config.NetFuncs, f.Config.TxRunners, f.Config.TokenTables
	s1.TxTypes, s1.FailFuncs, s1.TokenDels = f.Config.TxTypes, f.Config.FailFuncs, f.Config.TokenDels
	all1, first, err := analyzer.NewSuite(s1, facts.Config{Program: prog, Recording: true})
	if err != nil {
		return nil, err
	}
	var rules1 []*analysis.Analyzer
	for _, a := range all1 {
		for _, r := range rules {
			if r.Name == a.Name {
				rules1 = append(rules1, a)
			}
		}
	}
	first.Config.Consumers = len(rules1)
	var rootPaths []string
	for _, p := range pkgs {
		if !p.DepOnly {
			rootPaths = append(rootPaths, p.path())
		}
	}
	prog.SetRoots(rootPaths)
	d := newUnitDriver(pkgs)
	var sums map[string][sha256.Size]byte
	if cache != nil {
		sums = map[string][sha256.Size]byte{}
		for _, p := range pkgs {
			sums[p.ImportPath] = inputSum(p, modCache)
		}
		d.skip = cache.reuse(pkgs, sums, d)
	}
	names := newNameCheck(f.Config, pkgs)
	d.pass(first.Analyzer, rules1, func(pkg *types.Package, fset *token.FileSet) {
		prog.AddTypes(pkg, func(tn *types.TypeName) bool { return skipType(fset, tn) })
		names.root(pkg)
	})
	d.skip = nil
	if cache != nil {
		cache.keep(pkgs, sums, d)
	}
	lap("first pass")
	names.warn(stderr)
	errs := d.errs

	// Second pass, over the named packages that call an interface method
	// the whole program resolves, and those that import one of them: the
	// facts with interface calls resolved, and the rules, whose findings
	// replace the first pass's. The dependencies keep their first-pass
	// facts (a library's interface calls are not resolved to the
	// service's types). With a cache, the packages whose first pass was
	// kept keep their second pass too while the Program is what it was
	// (see depCache.reuse2).
	again := map[string]bool{}
	for _, p := range pkgs {
		if p.DepOnly || !d.analyzed(p) {
			continue
		}
		again[p.ImportPath] = prog.Resolves(p.path()) || os.Getenv("IDEMLINT_ALL") != ""
		for _, dep := range p.Deps {
			again[p.ImportPath] = again[p.ImportPath] || again[dep]
		}
	}
	// A package with a blind helper is judged again with its callers'
	// row locks (blindupdate); its facts stay, so its importers need not.
	for _, p := range pkgs {
		if !p.DepOnly && d.analyzed(p) && prog.Rejudges(p.path()) {
			again[p.ImportPath] = true
		}
	}
	prog.SetWhole(wholePackages(context.Background(), pkgs, d.failed))
	f.Config.Consumers = len(rules)
	d.errs = nil
	d.only = again
	d.drop(again)
	if cache != nil {
		d.skip = cache.reuse2(again, d)
	}
	d.pass(f.Analyzer, rules, nil)
	d.skip = nil
	if cache != nil {
		cache.keep2(again, d)
	}
	lap("second pass")
	// A package that failed in the first pass fails again in the second.
	seen := map[string]bool{}
	for _, e := range append(errs, d.errs...) {
		if !seen[e] {
			seen[e] = true
			loadErrs = append(loadErrs, e)
			fmt.Fprintln(stderr, e)
		}
	}
	for _, p := range pkgs {
		if d.failed[p.ImportPath] && !p.DepOnly {
			notAnalyzed = append(notAnalyzed, p.ImportPath)
		}
	}
	dirs := map[string]string{}
	for _, p := range pkgs {
		dirs[p.ImportPath] = p.Dir
	}
	findings, suppressed := d.findings()
	return &lintResult{roots: roots, findings: findings, suppressed: suppressed, loadErrs: loadErrs, notAnalyzed: notAnalyzed, dirs: dirs}, nil
}

// reportNotAnalyzed names the packages that were not analyzed, last, so
// that a partial run is not taken for a clean one.
func reportNotAnalyzed(w io.Writer, ids []string) {
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	ids = slices.Compact(ids)
	what := "1 package not analyzed (it or its imports did not load)"
	if len(ids) > 1 {
		what = strconv.Itoa(len(ids)) + " packages not analyzed (they or their imports did not load)"
	}
	fmt.Fprintf(w, "idemlint: %s: %s\n", what, strings.Join(ids, ", "))
}

// selectRules applies the enable flags as go/analysis drivers do: if any
// rule is set true, only those run; rules set false do not.
func selectRules(rules []*analysis.Analyzer, enabled map[string]*enable) []*analysis.Analyzer {
	only := false
	for _, e := range enabled {
		only = only || e.set && e.on
	}
	var out []*analysis.Analyzer
	for _, a := range rules {
		e := enabled[a.Name]
		if only && !(e.set && e.on) || !only && e.set && !e.on {
			continue
		}
		out = append(out, a)
	}
	return out
}

// skipType: types declared in test files, and mocks, fakes and stubs, are
// not what production code binds to an interface.
var reMock = regexp.MustCompile(`(?i)^(mock|fake|stub|spy|dummy)|(mock|fake|stub)s?$`)

func skipType(fset *token.FileSet, tn *types.TypeName) bool {
	if strings.HasSuffix(fset.Position(tn.Pos()).Filename, "_test.go") {
		return true
	}
	if reMock.MatchString(tn.Name()) {
		return true
	}
	for _, seg := range strings.Split(tn.Pkg().Path(), "/") {
		if reMock.MatchString(seg) || seg == "testutil" || seg == "testing" {
			return true
		}
	}
	return false
}

// finding is one diagnostic, listed once even when the package and its
// test variant both report it.
type finding struct {
	id        string // package ID
	pkg, rule string
	posn, end string
	file      string
	line, col int
	msg       string
	related   []related
	// suppressed: a //idemlint:ignore directive suppresses the finding,
	// giving reason ("" when it has none: the code action's placeholder).
	suppressed bool
	reason     string
	// start and stop are the span, as positions (the language server's
	// ranges); fixes are the analyzer's suggested fixes.
	start, stop token.Position
	fixes       []fix
}

type related struct {
	posn, msg   string
	start, stop token.Position
}

// fix is a suggested fix with its edits resolved to positions.
type fix struct {
	msg   string
	edits []edit
}

type edit struct {
	start, stop token.Position
	text        string
}

var cwd, _ = os.Getwd()

// rel prints a position relative to the working directory when it is
// below it.
func rel(p token.Position) string {
	if r, err := filepath.Rel(cwd, p.Filename); err == nil && !strings.HasPrefix(r, "..") {
		p.Filename = r
	}
	return p.String()
}

func printText(w io.Writer, fs []finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "%s: %s (%s)\n", f.posn, f.msg, f.rule)
		for _, r := range f.related {
			fmt.Fprintf(w, "%s: \t%s\n", r.posn, r.msg)
		}
	}
}

// jsonSuppressed is the key under which -json lists, per package, the
// diagnostics that directives suppress.
const jsonSuppressed = "idemlint:ignore"

// printJSON writes the go/analysis JSON tree (package -> rule ->
// diagnostics), each finding once.
//
// The diagnostics a //idemlint:ignore directive suppresses are listed
// apart, under the key "idemlint:ignore" of their package (not a rule: a
// consumer that counts a rule's findings does not count them), each with
// its rule as category and the directive's reason as justification; a
// directive left with the code action's placeholder has no justification.
func printJSON(w io.Writer, fs, suppressed []finding) error {
	type jsonRelated struct {
		Posn    string `json:"posn"`
		Message string `json:"message"`
	}
	type jsonDiag struct {
		Category string        `json:"category,omitempty"`
		Posn     string        `json:"posn"`
		End      string        `json:"end,omitempty"`
		Message  string        `json:"message"`
		Related  []jsonRelated `json:"related,omitempty"`
		// Justification is a suppression's reason.
		Justification string `json:"justification,omitempty"`
	}
	tree := map[string]map[string][]jsonDiag{}
	add := func(f finding, key string) {
		if tree[f.pkg] == nil {
			tree[f.pkg] = map[string][]jsonDiag{}
		}
		d := jsonDiag{Category: f.rule, Posn: f.posn, End: f.end, Message: f.msg, Justification: f.reason}
		for _, r := range f.related {
			d.Related = append(d.Related, jsonRelated{r.posn, r.msg})
		}
		tree[f.pkg][key] = append(tree[f.pkg][key], d)
	}
	for _, f := range fs {
		add(f, f.rule)
	}
	for _, f := range suppressed {
		add(f, jsonSuppressed)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "\t")
	return enc.Encode(tree)
}
