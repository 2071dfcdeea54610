package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/types/objectpath"

	"github.com/idemkit/idem/analyzer/facts"
)

// listed is a package as `go list -json -export -deps` describes it.
type listed struct {
	ImportPath      string
	Name            string
	Dir             string
	CompiledGoFiles []string
	Export          string
	ImportMap       map[string]string
	Deps            []string
	Standard        bool
	DepOnly         bool
	Module          *struct{ Path, GoVersion string }
	Error           *listError
	DepsErrors      []*listError
}

// listError is a package's load error as go list reports it.
type listError struct{ Pos, Err string }

// String is the error as go vet prints it: "pos: message", a compiler's
// error without its "# package" header.
func (e *listError) String() string {
	msg := strings.TrimSpace(e.Err)
	if strings.HasPrefix(msg, "# ") {
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = strings.TrimSpace(msg[i+1:])
		}
	}
	if e.Pos != "" && !strings.HasPrefix(msg, e.Pos) {
		msg = e.Pos + ": " + msg
	}
	return msg
}

// broken reports whether the package or one of its imports failed to load:
// it has no complete type information, so it is not analyzed.
func (l *listed) broken() bool { return l.Error != nil || len(l.DepsErrors) > 0 }

// path is the package path of a listed package: "p" for "p [p.test]".
func (l *listed) path() string {
	if i := strings.Index(l.ImportPath, " ["); i >= 0 {
		return l.ImportPath[:i]
	}
	return l.ImportPath
}

// goList lists the packages matching patterns and their dependencies,
// dependencies first, with their export data (go list compiles what the
// build cache lacks, as go vet does).
func goList(ctx context.Context, dir string, patterns []string, tests bool) ([]*listed, error) {
	args := []string{"list", "-e", "-json=ImportPath,Name,Dir,CompiledGoFiles,Export,ImportMap,Deps,Standard,DepOnly,Module,Error,DepsErrors",
		"-export", "-compiled", "-deps"}
	if tests {
		args = append(args, "-test")
	}
	cmd := exec.CommandContext(ctx, "go", append(append(args, "--"), patterns...)...)
	cmd.Dir = dir
	cancelGroup(ctx, cmd)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []*listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		l := new(listed)
		if err := dec.Decode(l); err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		pkgs = append(pkgs, l)
	}
	return pkgs, nil
}

// unitDriver analyzes one package at a time, as go vet does: each package
// is parsed and type-checked on its own, its imports read from export
// data, and dropped once analyzed, so memory holds one package (per core)
// and the facts. Facts stay in memory as values.
type unitDriver struct {
	pkgs  []*listed
	byID  map[string]*listed
	facts sync.Map // factKey -> analysis.Fact
	// pkgFacts holds package facts: pkgFactKey -> analysis.Fact.
	pkgFacts sync.Map
	diags    []finding
	diagMu   sync.Mutex
	errs     []string
	errMu    sync.Mutex
	// failed holds the named packages that loaded but could not be
	// analyzed (a parse, type or analyzer error), by ID.
	failed map[string]bool
	// only, when set, lists the package IDs to analyze.
	only map[string]bool
	// skip lists package IDs not to analyze: their facts are already
	// there (the language server's depCache).
	skip map[string]bool
}

type factKey struct {
	pkg string // package ID
	obj objectpath.Path
	typ reflect.Type
}

type pkgFactKey struct {
	pkg string // package ID
	typ reflect.Type
}

// withRequires returns as with every analyzer's requirements before it,
// each once. With factsOnly it keeps, of the analyzers after as[0], only the
// requirements that produce facts: a dependency-only package feeds the
// facts later packages read, and reports nothing.
func withRequires(as []*analysis.Analyzer, factsOnly bool) []*analysis.Analyzer {
	var out []*analysis.Analyzer
	seen := map[*analysis.Analyzer]bool{}
	var add func(a *analysis.Analyzer, keep bool)
	add = func(a *analysis.Analyzer, keep bool) {
		if seen[a] {
			return
		}
		for _, r := range a.Requires {
			add(r, !factsOnly || len(r.FactTypes) > 0)
		}
		if keep {
			seen[a] = true
			out = append(out, a)
		}
	}
	for i, a := range as {
		add(a, i == 0 || !factsOnly)
	}
	return out
}

func newUnitDriver(pkgs []*listed) *unitDriver {
	d := &unitDriver{pkgs: pkgs, byID: map[string]*listed{}}
	for _, p := range pkgs {
		d.byID[p.ImportPath] = p
	}
	return d
}

// analyzed reports whether a package's bodies are analyzed at all: not a
// package that did not load (see listed.broken), the standard library, the modeled libraries, nor generated test mains; and
// of the dependencies, only those that import (directly or not) a package
// through which a network call, a transaction or a token operation can
// happen: the net packages, database/sql, or a modeled library. The others
// can have no such fact; what is lost is their timeout-check and
// callback-running helpers (documented under Limits).
func (d *unitDriver) analyzed(l *listed) bool {
	if l.broken() || l.Standard || facts.IsModeled(l.path()) || strings.HasSuffix(l.ImportPath, ".test") || len(l.CompiledGoFiles) == 0 {
		return false
	}
	if !l.DepOnly {
		return true
	}
	for _, dep := range l.Deps {
		if dep == "net" || dep == "database/sql" || facts.IsModeled(dep) {
			return true
		}
		if i := strings.Index(dep, " ["); i >= 0 {
			dep = dep[:i]
		}
		if facts.IsModeled(dep) || strings.HasPrefix(dep, "github.com/idemkit/idem") {
			return true
		}
	}
	return false
}

// pass runs the analyzers over every analyzed package in dependency
// order, two at a time (per core), rules only on the roots. onRoot, if
// set, sees each root's types after type checking.
func (d *unitDriver) pass(factsA *analysis.Analyzer, rules []*analysis.Analyzer, onRoot func(*types.Package, *token.FileSet)) {
	done := map[string]chan struct{}{}
	for _, p := range d.pkgs {
		done[p.ImportPath] = make(chan struct{})
	}
	// Up to GOMAXPROCS packages at once, but no more than the largest
	// import closure's worth of them: a package's memory is mostly the
	// export data of what it imports, so two large ones run one after the
	// other and small ones side by side.
	capacity := 1
	for _, p := range d.pkgs {
		if d.analyzed(p) && len(p.Deps) > capacity {
			capacity = len(p.Deps)
		}
	}
	sem := newWeighted(capacity, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, p := range d.pkgs {
		wg.Add(1)
		go func(p *listed) {
			defer wg.Done()
			defer close(done[p.ImportPath])
			for _, dep := range p.Deps {
				if ch, ok := done[dep]; ok {
					<-ch
				}
			}
			if !d.analyzed(p) || d.only != nil && !d.only[p.ImportPath] || d.skip[p.ImportPath] {
				return
			}
			w := max(len(p.Deps), 1)
			sem.acquire(w)
			defer sem.release(w)
			// Labels for IDEMLINT_CPUPROFILE: which pass, and whether the
			// unit is a named package or a dependency, so that a profile
			// says what a re-analysis would save by skipping either
			// (go tool pprof -tagfocus=unit=dep).
			kind, pass := "root", "1"
			if p.DepOnly {
				kind = "dep"
			}
			if d.only != nil {
				pass = "2"
			}
			pprof.Do(context.Background(), pprof.Labels("unit", kind, "pass", pass), func(context.Context) {
				d.unit(p, withRequires(append([]*analysis.Analyzer{factsA}, rules...), p.DepOnly), rules, onRoot)
			})
		}(p)
	}
	wg.Wait()
}

// fail records an error that stopped the analysis of p.
func (d *unitDriver) fail(p *listed, format string, args ...any) {
	d.errMu.Lock()
	d.errs = append(d.errs, fmt.Sprintf(format, args...))
	if d.failed == nil {
		d.failed = map[string]bool{}
	}
	d.failed[p.ImportPath] = true
	d.errMu.Unlock()
}

// unit type-checks one package from source against its imports' export
// data and runs the analyzers on it.
func (d *unitDriver) unit(p *listed, as, rules []*analysis.Analyzer, onRoot func(*types.Package, *token.FileSet)) {
	fset := token.NewFileSet()
	imports := map[string]*types.Package{}
	var files []*ast.File
	for _, name := range p.CompiledGoFiles {
		if !filepath.IsAbs(name) {
			name = filepath.Join(p.Dir, name)
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			if !p.DepOnly {
				d.fail(p, "%v", err)
			}
			return
		}
		files = append(files, f)
	}
	// path -> package ID, for this package's view of its dependencies
	// (a test variant sees "q [p.test]" for "q").
	ids := map[string]string{p.path(): p.ImportPath}
	for _, dep := range p.Deps {
		if l := d.byID[dep]; l != nil {
			if _, ok := ids[l.path()]; !ok || strings.Contains(dep, " [") {
				ids[l.path()] = dep
			}
		}
	}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if path == "unsafe" {
			return types.Unsafe, nil
		}
		id := p.ImportMap[path]
		if id == "" {
			id = path
		}
		l := d.byID[id]
		if l == nil || l.Export == "" {
			return nil, fmt.Errorf("no export data for %s", id)
		}
		if pkg := imports[l.path()]; pkg != nil && pkg.Complete() {
			return pkg, nil
		}
		f, err := os.Open(l.Export)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		// go list -export (Go 1.26) names compiler archives, which only
		// NewReader unwraps.
		//lint:ignore SA1019 the export files of this Go version are archives
		r, err := gcexportdata.NewReader(bufio.NewReader(f))
		if err != nil {
			return nil, err
		}
		return gcexportdata.Read(r, fset, imports, l.path())
	})
	info := &types.Info{
		Types:        map[ast.Expr]types.TypeAndValue{},
		Defs:         map[*ast.Ident]types.Object{},
		Uses:         map[*ast.Ident]types.Object{},
		Implicits:    map[ast.Node]types.Object{},
		Selections:   map[*ast.SelectorExpr]*types.Selection{},
		Scopes:       map[ast.Node]*types.Scope{},
		Instances:    map[*ast.Ident]types.Instance{},
		FileVersions: map[*ast.File]string{},
	}
	var typeErrs []string
	conf := types.Config{
		Importer: imp,
		Sizes:    types.SizesFor("gc", runtime.GOARCH),
		Error: func(err error) {
			if len(typeErrs) < 10 {
				typeErrs = append(typeErrs, err.Error())
			}
		},
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	pkg, _ := conf.Check(p.path(), fset, files, info)
	if len(typeErrs) > 0 {
		if !p.DepOnly {
			d.fail(p, "%s", strings.Join(typeErrs, "\n"))
		}
		return
	}
	if onRoot != nil && !p.DepOnly {
		onRoot(pkg, fset)
	}
	var module *analysis.Module
	if p.Module != nil {
		module = &analysis.Module{Path: p.Module.Path, GoVersion: p.Module.GoVersion}
	}
	results := map[*analysis.Analyzer]any{}
	isRule := map[*analysis.Analyzer]bool{}
	for _, a := range rules {
		isRule[a] = !p.DepOnly
	}
	pkgID := func(q *types.Package) string {
		if id := ids[q.Path()]; id != "" {
			return id
		}
		return q.Path()
	}
	for _, a := range as {
		pass := &analysis.Pass{
			Analyzer:   a,
			Fset:       fset,
			Files:      files,
			Pkg:        pkg,
			TypesInfo:  info,
			TypesSizes: conf.Sizes,
			ResultOf:   map[*analysis.Analyzer]any{},
			Module:     module,
			ReadFile:   os.ReadFile,
			Report: func(diag analysis.Diagnostic) {
				if isRule[a] {
					d.report(p, a, fset, diag)
				}
			},
			ImportObjectFact: func(obj types.Object, fact analysis.Fact) bool {
				if obj == nil || obj.Pkg() == nil {
					return false
				}
				op, err := objectpath.For(obj)
				if err != nil {
					return false
				}
				id := ids[obj.Pkg().Path()]
				if id == "" {
					id = obj.Pkg().Path()
				}
				v, ok := d.facts.Load(factKey{id, op, reflect.TypeOf(fact)})
				if !ok {
					return false
				}
				reflect.ValueOf(fact).Elem().Set(reflect.ValueOf(v).Elem())
				return true
			},
			ExportObjectFact: func(obj types.Object, fact analysis.Fact) {
				if obj.Pkg() != pkg {
					return
				}
				if op, err := objectpath.For(obj); err == nil {
					d.facts.Store(factKey{p.ImportPath, op, reflect.TypeOf(fact)}, fact)
				}
			},
			ImportPackageFact: func(q *types.Package, fact analysis.Fact) bool {
				v, ok := d.pkgFacts.Load(pkgFactKey{pkgID(q), reflect.TypeOf(fact)})
				if !ok {
					return false
				}
				reflect.ValueOf(fact).Elem().Set(reflect.ValueOf(v).Elem())
				return true
			},
			ExportPackageFact: func(fact analysis.Fact) {
				d.pkgFacts.Store(pkgFactKey{p.ImportPath, reflect.TypeOf(fact)}, fact)
			},
			AllObjectFacts: func() []analysis.ObjectFact { return nil },
			AllPackageFacts: func() []analysis.PackageFact {
				return d.allPackageFacts(pkg, pkgID, a)
			},
		}
		for _, req := range a.Requires {
			pass.ResultOf[req] = results[req]
		}
		res, err := a.Run(pass)
		if err != nil {
			d.fail(p, "%s: %s: %v", p.ImportPath, a.Name, err)
			return
		}
		results[a] = res
	}
}

// allPackageFacts returns the package facts of a's types held for pkg and
// every package it imports, directly or not.
func (d *unitDriver) allPackageFacts(pkg *types.Package, pkgID func(*types.Package) string, a *analysis.Analyzer) []analysis.PackageFact {
	var out []analysis.PackageFact
	seen := map[*types.Package]bool{}
	var walk func(q *types.Package)
	walk = func(q *types.Package) {
		if seen[q] {
			return
		}
		seen[q] = true
		for _, ft := range a.FactTypes {
			if v, ok := d.pkgFacts.Load(pkgFactKey{pkgID(q), reflect.TypeOf(ft)}); ok {
				out = append(out, analysis.PackageFact{Package: q, Fact: v.(analysis.Fact)})
			}
		}
		for _, imp := range q.Imports() {
			walk(imp)
		}
	}
	walk(pkg)
	return out
}

// weighted is a semaphore of capacity units of weight, and at most n
// holders.
type weighted struct {
	mu        sync.Mutex
	cond      *sync.Cond
	free, cap int
	n, held   int
}

func newWeighted(capacity, n int) *weighted {
	w := &weighted{free: capacity, cap: capacity, n: n}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *weighted) acquire(k int) {
	k = min(k, w.cap)
	w.mu.Lock()
	for w.free < k || w.held >= w.n {
		w.cond.Wait()
	}
	w.free -= k
	w.held++
	w.mu.Unlock()
}

func (w *weighted) release(k int) {
	k = min(k, w.cap)
	w.mu.Lock()
	w.free += k
	w.held--
	w.mu.Unlock()
	w.cond.Broadcast()
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func (d *unitDriver) report(p *listed, a *analysis.Analyzer, fset *token.FileSet, diag analysis.Diagnostic) {
	pos := fset.Position(diag.Pos)
	fd := finding{id: p.ImportPath, pkg: strings.TrimSuffix(p.path(), "_test"), rule: a.Name, posn: rel(pos), file: pos.Filename, line: pos.Line, col: pos.Column, msg: diag.Message, start: pos, stop: pos}
	if reason, ok := strings.CutPrefix(diag.Category, analyzer.SuppressedCategory); ok {
		fd.suppressed, fd.reason = true, reason
	}
	if diag.End.IsValid() {
		fd.stop = fset.Position(diag.End)
		fd.end = rel(fd.stop)
	}
	for _, r := range diag.Related {
		rp := fset.Position(r.Pos)
		rr := related{posn: rel(rp), msg: r.Message, start: rp, stop: rp}
		if r.End.IsValid() {
			rr.stop = fset.Position(r.End)
		}
		fd.related = append(fd.related, rr)
	}
	for _, sf := range diag.SuggestedFixes {
		fx := fix{msg: sf.Message}
		for _, e := range sf.TextEdits {
			end := e.End
			if !end.IsValid() {
				end = e.Pos
			}
			fx.edits = append(fx.edits, edit{fset.Position(e.Pos), fset.Position(end), string(e.NewText)})
		}
		fd.fixes = append(fd.fixes, fx)
	}
	d.diagMu.Lock()
	d.diags = append(d.diags, fd)
	d.diagMu.Unlock()
}

// drop forgets the diagnostics of the given packages.
func (d *unitDriver) drop(ids map[string]bool) {
	keep := d.diags[:0]
	for _, f := range d.diags {
		if !ids[f.id] {
			keep = append(keep, f)
		}
	}
	d.diags = keep
}

// findings returns the diagnostics, each once (a package and its test
// variant report the same ones), sorted by position: the findings, and
// apart those a directive suppressed.
func (d *unitDriver) findings() (findings, suppressed []finding) {
	for _, f := range d.all() {
		if f.suppressed {
			suppressed = append(suppressed, f)
		} else {
			findings = append(findings, f)
		}
	}
	return findings, suppressed
}

// all returns the diagnostics, suppressed or not, each once, sorted by
// position.
func (d *unitDriver) all() []finding {
	seen := map[string]bool{}
	var out []finding
	sort.SliceStable(d.diags, func(i, j int) bool { return d.diags[i].pkg < d.diags[j].pkg })
	for _, f := range d.diags {
		k := f.rule + "\x00" + f.posn + "\x00" + f.msg
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, f)
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
	return out
}

// loadErrors returns the load errors of the named packages and of what
// they import, each once, in the order go list gives them, and the named
// packages that are not analyzed because of them (by path, sorted).
func loadErrors(pkgs []*listed) (errs, notAnalyzed []string) {
	seen := map[string]bool{}
	add := func(e *listError) {
		if s := e.String(); !seen[s] {
			seen[s] = true
			errs = append(errs, s)
		}
	}
	skipped := map[string]bool{}
	for _, p := range pkgs {
		if p.DepOnly || !p.broken() {
			continue
		}
		if p.Error != nil {
			add(p.Error)
		}
		for _, e := range p.DepsErrors {
			add(e)
		}
		if !strings.HasSuffix(p.ImportPath, ".test") {
			skipped[p.ImportPath] = true
		}
	}
	for id := range skipped {
		// A test variant, "p [p.test]", is named only when p itself loaded.
		if i := strings.Index(id, " ["); i < 0 || !skipped[id[:i]] {
			notAnalyzed = append(notAnalyzed, id)
		}
	}
	sort.Strings(notAnalyzed)
	return errs, notAnalyzed
}
