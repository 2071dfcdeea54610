package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"

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
	err := lsp.Serve(context.Background(), stdin, stdout, lsp.Config{
		Lint:     lintModule,
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

// lintModule is the server's analysis: the command's driver (lint) over
// the module rooted at dir, with its .idemlint.json read afresh and the
// client's options added.
func lintModule(ctx context.Context, dir string, options json.RawMessage) (*lsp.Report, error) {
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
	prog := facts.NewProgram()
	rules, f, err := analyzer.NewSuite(settings, facts.Config{Program: prog})
	if err != nil {
		return nil, err
	}
	res, err := lint(ctx, dir, settings, prog, rules, f, opts.Patterns, tests, io.Discard, func(string) {})
	if err != nil {
		return nil, err
	}
	return toReport(dir, res), nil
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
func toReport(dir string, res *lintResult) *lsp.Report {
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
		rep.Errors = append(rep.Errors, loadError(dir, e))
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
