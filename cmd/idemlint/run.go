package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

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
	// The whole program is in memory at once: collect more often than
	// Go's default (GOGC=100 lets the heap grow to twice what is live).
	// bench/idemlint.sh measured GOGC=50 at two thirds of the default's
	// peak; a GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	prog := new(facts.Program)
	rules, f, err := analyzer.NewSuite(settings, facts.Config{Program: prog})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fs := flag.NewFlagSet("idemlint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "emit JSON output")
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
		fmt.Fprintf(stderr, "idemlint: idempotency rules (%s).\n\nUsage: idemlint [-flag] [package]\n\n", strings.Join(analyzer.Rules, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
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
			fmt.Fprintf(stderr, "idemlint: %s: %v\n", what, time.Since(t0).Round(time.Millisecond))
		}
	}
	if path := os.Getenv("IDEMLINT_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	pkgs, err := load(patterns, *tests)
	lap("load")
	if os.Getenv("IDEMLINT_LOADONLY") != "" {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemlint:", err)
		return 1
	}
	if debug {
		packages.Visit(pkgs, nil, func(p *packages.Package) {
			for _, e := range p.Errors {
				fmt.Fprintln(stderr, p.ID, e)
			}
		})
	}
	if n := packages.PrintErrors(pkgs); n > 0 {
		return 1
	}

	rootPaths := map[string]bool{}
	var typs []*types.Package
	for _, p := range pkgs {
		rootPaths[p.PkgPath] = true
		typs = append(typs, p.Types)
	}
	*prog = *facts.NewProgram(typs, func(tn *types.TypeName) bool { return skipType(pkgs[0].Fset, tn) })

	// First pass: the facts alone, recording concrete methods.
	first := facts.New(facts.Config{
		NetFuncs: f.Config.NetFuncs, TxRunners: f.Config.TxRunners, TokenTables: f.Config.TokenTables,
		TxTypes: f.Config.TxTypes, FailFuncs: f.Config.FailFuncs, TokenDels: f.Config.TokenDels,
		Program: prog, Recording: true,
	})
	if _, err := checker.Analyze([]*analysis.Analyzer{first.Analyzer}, pkgs, nil); err != nil {
		fmt.Fprintln(stderr, "idemlint:", err)
		return 1
	}

	lap("first pass")
	// Second pass: the rules.
	f.Config.Roots = rootPaths
	f.Config.Consumers = len(rules)
	g, err := checker.Analyze(rules, pkgs, nil)
	if err != nil {
		fmt.Fprintln(stderr, "idemlint:", err)
		return 1
	}
	lap("second pass")
	findings, failed := collect(g, stderr)
	if *asJSON {
		if err := printJSON(stdout, findings); err != nil {
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

var goroot = filepath.Clean(build.Default.GOROOT) + string(filepath.Separator)

// load loads the packages and, from source, their dependencies. The bodies
// of the standard library and of the libraries the rules model by name are
// dropped while parsing: the rules never read them, and they are most of
// the memory a whole-program load takes.
func load(patterns []string, tests bool) ([]*packages.Package, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedImports |
			packages.NeedTypes | packages.NeedTypesSizes | packages.NeedSyntax | packages.NeedTypesInfo |
			packages.NeedDeps | packages.NeedModule,
		Tests: tests,
		ParseFile: func(fset *token.FileSet, filename string, src []byte) (*ast.File, error) {
			mode := parser.AllErrors | parser.ParseComments | parser.SkipObjectResolution
			if !bodiesNeeded(filename) {
				f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
				if f != nil {
					for _, d := range f.Decls {
						if fd, ok := d.(*ast.FuncDecl); ok {
							fd.Body = nil
						}
					}
				}
				return f, err
			}
			return parser.ParseFile(fset, filename, src, mode)
		},
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, err
	}
	// Dropped bodies leave imports unused and the like: those packages'
	// type errors are ours, not the code's.
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if len(p.GoFiles) > 0 && !bodiesNeeded(p.GoFiles[0]) {
			var keep []packages.Error
			for _, e := range p.Errors {
				if e.Kind != packages.TypeError {
					keep = append(keep, e)
				}
			}
			p.Errors = keep
		}
		// IllTyped covers the dependencies too
		p.IllTyped = len(p.Errors) > 0
		for _, imp := range p.Imports {
			p.IllTyped = p.IllTyped || imp.IllTyped
		}
	})
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("no packages matched %v", patterns)
	}
	return pkgs, nil
}

// bodiesNeeded reports whether a file's function bodies are analyzed: not
// for the standard library nor for the modeled libraries in the module
// cache.
func bodiesNeeded(filename string) bool {
	filename = filepath.Clean(filename)
	if strings.HasPrefix(filename, goroot) {
		return false
	}
	const mod = string(filepath.Separator) + "pkg" + string(filepath.Separator) + "mod" + string(filepath.Separator)
	i := strings.Index(filename, mod)
	if i < 0 {
		return true
	}
	rest := filepath.ToSlash(filename[i+len(mod):])
	at := strings.Index(rest, "@")
	if at < 0 {
		return true
	}
	return !facts.IsModeled(rest[:at])
}

// finding is one diagnostic, listed once even when the package and its
// test variant both report it.
type finding struct {
	pkg, rule string
	posn, end string
	file      string
	line, col int
	msg       string
	related   []related
}

type related struct{ posn, msg string }

func collect(g *checker.Graph, stderr io.Writer) ([]finding, bool) {
	seen := map[string]bool{}
	var out []finding
	failed := false
	acts := append([]*checker.Action(nil), g.Roots...)
	// "p" before "p [p.test]": a finding is listed under the plain package.
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].Package.ID < acts[j].Package.ID })
	reported := map[string]bool{}
	for act := range g.All() {
		if act.Err != nil && !strings.HasPrefix(act.Err.Error(), "failed prerequisites") && !reported[act.Package.ID] {
			reported[act.Package.ID] = true
			fmt.Fprintf(stderr, "%s: %v\n", act.Package.ID, act.Err)
			failed = true
		}
	}
	for _, act := range acts {
		if act.Err != nil {
			failed = true
			continue
		}
		fset := act.Package.Fset
		for _, d := range act.Diagnostics {
			p := fset.Position(d.Pos)
			key := act.Analyzer.Name + "\x00" + p.String() + "\x00" + d.Message
			if seen[key] {
				continue
			}
			seen[key] = true
			fd := finding{pkg: pkgPathOf(act.Package), rule: act.Analyzer.Name, posn: rel(p), file: p.Filename, line: p.Line, col: p.Column, msg: d.Message}
			if d.End.IsValid() {
				fd.end = rel(fset.Position(d.End))
			}
			for _, r := range d.Related {
				fd.related = append(fd.related, related{rel(fset.Position(r.Pos)), r.Message})
			}
			out = append(out, fd)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.file != b.file {
			return a.file < b.file
		}
		if a.line != b.line {
			return a.line < b.line
		}
		return a.col < b.col
	})
	return out, failed
}

// pkgPathOf names a package without its test-variant suffix.
func pkgPathOf(p *packages.Package) string {
	if p.PkgPath != "" {
		return strings.TrimSuffix(p.PkgPath, "_test")
	}
	return p.ID
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
		fmt.Fprintf(w, "%s: %s\n", f.posn, f.msg)
		for _, r := range f.related {
			fmt.Fprintf(w, "%s: \t%s\n", r.posn, r.msg)
		}
	}
}

// printJSON writes the go/analysis JSON tree (package -> rule ->
// diagnostics), each finding once.
func printJSON(w io.Writer, fs []finding) error {
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
	}
	tree := map[string]map[string][]jsonDiag{}
	for _, f := range fs {
		if tree[f.pkg] == nil {
			tree[f.pkg] = map[string][]jsonDiag{}
		}
		d := jsonDiag{Category: f.rule, Posn: f.posn, End: f.end, Message: f.msg}
		for _, r := range f.related {
			d.Related = append(d.Related, jsonRelated{r.posn, r.msg})
		}
		tree[f.pkg][f.rule] = append(tree[f.pkg][f.rule], d)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "\t")
	return enc.Encode(tree)
}
