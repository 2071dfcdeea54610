package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem/analyzer"
	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/cmd/idemlint/internal/lsp"
	"github.com/idemkit/idem/internal/version"
)

// lspUsage is `idemlint lsp -help`.
const lspUsage = `Usage: idemlint lsp

Runs idemlint as a language server (LSP 3.17, JSON-RPC over stdin and
stdout) for editors: each module with an open file is analyzed by the
same driver as 'idemlint ./...' when a file is opened or saved, and the
findings of the open files' packages are published as diagnostics, with
code actions to suppress them. The log goes to stderr.

initializationOptions (all optional) take the keys of .idemlint.json,
added to the file's, and:
  "patterns": ["./..."]   the packages analyzed, relative to the module root
  "tests": true           analyze test files too (as -test)

See docs/idemlint.md, "In the editor".
`

// lspOptions are the client's initializationOptions.
type lspOptions struct {
	analyzer.Settings
	Patterns []string `json:"patterns"`
	Tests    *bool    `json:"tests"`
}

// serveLSP runs `idemlint lsp` on stdin and stdout and returns the exit
// status: 0 after shutdown and exit, 1 otherwise.
func serveLSP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idemlint lsp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, lspUsage) }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "idemlint lsp: unexpected arguments %q\n", fs.Args())
		return 1
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50) // as the command: see run
	}
	headlines := map[string]string{}
	for _, a := range analyzer.Analyzers() {
		first, _, _ := strings.Cut(a.Doc, "\n")
		first = strings.TrimPrefix(first, "report ")
		if first != "" {
			first = strings.ToUpper(first[:1]) + first[1:]
		}
		headlines[a.Name] = first
	}
	l := &lspLinter{last: map[string]lspRun{}, deps: map[string]*depCache{}}
	err := lsp.Serve(context.Background(), stdin, stdout, lsp.Config{
		Lint:     l.lint,
		Headline: func(rule string) string { return headlines[rule] },
		DocURL:   ruleHelp,
		Version:  version.Read().String(),
		Log:      stderr,
	})
	if err != nil {
		return 1
	}
	return 0
}

// lspLinter is the server's analysis: the command's driver over a
// directory, with the last result of each directory kept and given again
// while none of the analysis's inputs changed.
type lspLinter struct {
	mu         sync.Mutex
	last       map[string]lspRun    // by directory
	deps       map[string]*depCache // by directory
	modCache   string               // GOMODCACHE: files there never change
	modCacheOK bool
	runs       atomic.Int64 // runs so far (IDEMLINT_CPUPROFILE)
	// listings are the directories' last go list outputs, given again
	// while a save cannot have changed them (see listing).
	listings map[string]*listing
	// goLists counts the go list runs of lint (the tests).
	goLists atomic.Int64
}

// lspRun is a directory's last analysis and the fingerprint of its inputs.
type lspRun struct {
	inputs [sha256.Size]byte
	res    *lintResult
}

// lint runs the driver (lint) over dir as 'idemlint ./...' there, with
// its .idemlint.json read afresh and the client's options added. When go
// list shows that no input changed (the same packages, export data, source
// files, load errors and settings), the last result is given again: opening
// a second file of a module then costs a go list, not an analysis.
func (l *lspLinter) lint(ctx context.Context, dir string, options json.RawMessage) (*lsp.Report, error) {
	// IDEMLINT_CPUPROFILE=file writes file.N, the CPU profile of the
	// server's Nth run (bench/lsp.sh: the first run, then the saves).
	if path := os.Getenv("IDEMLINT_CPUPROFILE"); path != "" {
		if f, err := os.Create(fmt.Sprintf("%s.%d", path, l.runs.Add(1))); err == nil {
			defer f.Close()
			if pprof.StartCPUProfile(f) == nil { // one run at a time
				defer pprof.StopCPUProfile()
			}
		}
	}
	settings, path, err := analyzer.LoadConfig(dir)
	if err != nil {
		if path == "" {
			return nil, err
		}
		return &lsp.Report{Errors: []lsp.LoadError{{Span: lsp.Span{File: path, Line: 1, Col: 1}, Message: err.Error()}}}, nil
	}
	opts := lspOptions{Patterns: []string{"./..."}}
	if len(options) > 0 && string(options) != "null" {
		var o lspOptions
		dec := json.NewDecoder(bytes.NewReader(options))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("initializationOptions: %w", err)
		}
		settings = mergeSettings(settings, o.Settings)
		if len(o.Patterns) > 0 {
			opts.Patterns = o.Patterns
		}
		opts.Tests = o.Tests
	}
	tests := opts.Tests == nil || *opts.Tests
	key, err := l.fingerprint(nil, settings, opts.Patterns, tests)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	cache := l.deps[dir]
	if cache == nil || cache.key != key {
		cache = &depCache{key: key, prog: facts.NewProgram()}
	}
	// Taken out while it runs: a run that fails leaves no half-updated
	// cache behind.
	delete(l.deps, dir)
	modCache := l.modCache
	l.mu.Unlock()
	prog := cache.prog
	rules, f, err := analyzer.NewSuite(settings, facts.Config{Program: prog})
	if err != nil {
		return nil, err
	}
	pkgs, ls, relisted, err := l.list(ctx, dir, key, modCache, opts.Patterns, tests)
	if err != nil {
		return nil, err
	}
	inputs, err := l.fingerprint(pkgs, settings, opts.Patterns, tests)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	last, ok := l.last[dir]
	if ok && last.inputs == inputs {
		l.deps[dir] = cache // not run: as it was
		if len(last.res.loadErrs) == 0 {
			l.keepListing(dir, ls)
		}
	}
	l.mu.Unlock()
	if ok && last.inputs == inputs {
		rep := toReport(last.res)
		rep.Reused = true
		return rep, nil
	}
	res, err := lintListed(pkgs, settings, prog, rules, f, io.Discard, func(string) {}, cache, modCache)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.deps[dir] = cache
	if !relisted && len(res.loadErrs) > 0 {
		// The edited package does not type-check: the error is go
		// list's to give, as the command gives it.
		delete(l.listings, dir)
		l.mu.Unlock()
		return l.lint(ctx, dir, options)
	}
	// Kept for the next save only after a run without load errors.
	if len(res.loadErrs) == 0 {
		l.keepListing(dir, ls)
	} else {
		delete(l.listings, dir)
	}
	l.mu.Unlock()
	if res.roots == 0 {
		return nil, fmt.Errorf("no packages matched %v", opts.Patterns)
	}
	res.dir = dir
	l.mu.Lock()
	l.last[dir] = lspRun{inputs, res}
	l.mu.Unlock()
	return toReport(res), nil
}

// keepListing keeps ls (if not nil) as dir's listing for the next save;
// l.mu is held.
func (l *lspLinter) keepListing(dir string, ls *listing) {
	if ls == nil {
		delete(l.listings, dir)
		return
	}
	if l.listings == nil {
		l.listings = map[string]*listing{}
	}
	l.listings[dir] = ls
}

// list returns the packages go list gives for patterns in dir, or the
// last listing of dir when the files changed since cannot change it (see
// listing); relisted says whether go list ran. ls, if not nil, is the
// listing to keep for the next save once the run succeeds without load
// errors: it is nil when the files changed while go list ran.
func (l *lspLinter) list(ctx context.Context, dir string, key [sha256.Size]byte, modCache string, patterns []string, tests bool) (pkgs []*listed, ls *listing, relisted bool, err error) {
	l.mu.Lock()
	last := l.listings[dir]
	delete(l.listings, dir) // given back by lint after a clean run
	l.mu.Unlock()
	if last != nil && last.key == key {
		if now, ok := last.stillValid(dir, modCache); ok {
			return last.pkgs, &listing{key: key, pkgs: last.pkgs, snap: now}, false, nil
		}
	}
	before, snapErr := takeSnapshot(dir, nil, modCache)
	l.goLists.Add(1)
	pkgs, err = goList(ctx, dir, patterns, tests)
	if err != nil {
		return nil, nil, true, err
	}
	// The packages' directories outside dir are known only now; a file
	// under dir that changed while go list ran leaves no listing.
	after, err := takeSnapshot(dir, pkgs, modCache)
	if snapErr != nil || err != nil || !before.subsetOf(after) {
		return pkgs, nil, true, nil
	}
	return pkgs, &listing{key: key, pkgs: pkgs, snap: after}, true, nil
}

// fingerprint hashes what an analysis reads: the settings, and for every
// listed package its ID, export data, load errors and, outside the module
// cache (whose files never change), the contents of its source files.
func (l *lspLinter) fingerprint(pkgs []*listed, settings analyzer.Settings, patterns []string, tests bool) ([sha256.Size]byte, error) {
	var zero [sha256.Size]byte
	l.mu.Lock()
	if !l.modCacheOK {
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
			l.modCache = strings.TrimSpace(string(out))
		}
		l.modCacheOK = true
	}
	modCache := l.modCache
	l.mu.Unlock()
	h := sha256.New()
	enc := json.NewEncoder(h)
	if err := enc.Encode([]any{settings, patterns, tests}); err != nil {
		return zero, err
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		if err := enc.Encode([]any{p.ImportPath, p.Export, p.Error, p.DepsErrors, p.CompiledGoFiles}); err != nil {
			return zero, err
		}
		if p.Standard || modCache != "" && strings.HasPrefix(p.Dir, modCache+string(filepath.Separator)) {
			continue
		}
		for _, name := range p.CompiledGoFiles {
			if !filepath.IsAbs(name) {
				name = filepath.Join(p.Dir, name)
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			data, err := os.ReadFile(name)
			if err != nil {
				// Gone since go list: analyze, and let the driver say so.
				data = []byte(err.Error())
			}
			fmt.Fprintf(h, "%s %d\n", name, len(data))
			h.Write(data)
		}
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// mergeSettings adds b's lists to a's, as the command's flags add to the
// file.
func mergeSettings(a, b analyzer.Settings) analyzer.Settings {
	a.Disable = append(a.Disable, b.Disable...)
	a.NetFuncs = append(a.NetFuncs, b.NetFuncs...)
	a.TxRunners = append(a.TxRunners, b.TxRunners...)
	a.TokenTables = append(a.TokenTables, b.TokenTables...)
	a.TxTypes = append(a.TxTypes, b.TxTypes...)
	a.FailFuncs = append(a.FailFuncs, b.FailFuncs...)
	a.TokenDels = append(a.TokenDels, b.TokenDels...)
	a.StateColumns = append(a.StateColumns, b.StateColumns...)
	return a
}

// toReport turns the driver's result into the server's.
func toReport(res *lintResult) *lsp.Report {
	rep := &lsp.Report{}
	for _, f := range res.findings {
		lf := lsp.Finding{Rule: f.rule, Message: f.msg, Span: span(f.start, f.stop)}
		for _, r := range f.related {
			lf.Related = append(lf.Related, lsp.Related{Span: span(r.start, r.stop), Message: r.msg})
		}
		for _, fx := range f.fixes {
			lfx := lsp.Fix{Title: fx.msg}
			for _, e := range fx.edits {
				lfx.Edits = append(lfx.Edits, lsp.Edit{Span: span(e.start, e.stop), NewText: e.text})
			}
			lf.Fixes = append(lf.Fixes, lfx)
		}
		rep.Findings = append(rep.Findings, lf)
	}
	for _, e := range res.loadErrs {
		rep.Errors = append(rep.Errors, loadError(res.dir, e))
	}
	for _, id := range res.notAnalyzed {
		if d := res.dirs[id]; d != "" {
			rep.NotAnalyzed = append(rep.NotAnalyzed, d)
		}
	}
	return rep
}

func span(start, stop token.Position) lsp.Span {
	return lsp.Span{File: start.Filename, Line: start.Line, Col: start.Column, EndLine: stop.Line, EndCol: stop.Column}
}

// reLoadPos is the position a load error starts with (go list's are
// relative to the directory it ran in).
var reLoadPos = regexp.MustCompile(`^([^\n]+?\.go|[^\n]*go\.mod):(\d+)(?::(\d+))?: `)

// loadError places a load error ("pos: message") at its position, or
// nowhere (the server puts it on go.mod).
func loadError(dir, msg string) lsp.LoadError {
	m := reLoadPos.FindStringSubmatch(msg)
	if m == nil {
		return lsp.LoadError{Message: msg}
	}
	file := m[1]
	if !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	var line, col int
	fmt.Sscan(m[2], &line)
	if m[3] != "" {
		fmt.Sscan(m[3], &col)
	}
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return lsp.LoadError{Message: msg}
	}
	return lsp.LoadError{Span: lsp.Span{File: file, Line: line, Col: col}, Message: msg}
}
