// Package directive implements idemlint's suppression comments:
//
//	//idemlint:ignore <rule> <reason>
//
// on the line of a diagnostic or on the line above it. The reason is
// required: a directive without one suppresses nothing and is reported.
package directive

import (
	"go/ast"
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
)

const prefix = "//idemlint:ignore"

type key struct {
	file string
	line int
}

// Reporter reports a rule's diagnostics unless a directive suppresses them.
type Reporter struct {
	pass    *analysis.Pass
	rule    string
	ignored map[key]bool
	seen    map[token.Pos]bool
}

// New scans the pass's files for directives naming rule, reports those
// without a reason, and returns a Reporter for rule.
func New(pass *analysis.Pass, rule string) *Reporter {
	r := &Reporter{pass: pass, rule: rule, ignored: map[key]bool{}, seen: map[token.Pos]bool{}}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				r.scan(c)
			}
		}
	}
	return r
}

func (r *Reporter) scan(c *ast.Comment) {
	if !strings.HasPrefix(c.Text, prefix) {
		return
	}
	rest := strings.TrimPrefix(c.Text, prefix)
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return
	}
	if i := strings.Index(rest, "//"); i >= 0 {
		rest = rest[:i] // a trailing comment is not a reason
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || fields[0] != r.rule {
		return
	}
	if len(fields) < 2 {
		r.pass.Report(analysis.Diagnostic{
			Pos:      c.Pos(),
			End:      c.End(),
			Category: r.rule,
			Message:  "idemlint:ignore " + r.rule + " needs a reason: write //idemlint:ignore " + r.rule + " <why this is safe>; without one it suppresses nothing",
		})
		return
	}
	p := r.pass.Fset.Position(c.Pos())
	r.ignored[key{p.Filename, p.Line}] = true
}

// Ignored reports whether a diagnostic at pos is suppressed.
func (r *Reporter) Ignored(pos token.Pos) bool {
	p := r.pass.Fset.Position(pos)
	return r.ignored[key{p.Filename, p.Line}] || r.ignored[key{p.Filename, p.Line - 1}]
}

// Report reports d unless it is suppressed or a diagnostic was already
// reported at the same position.
func (r *Reporter) Report(d analysis.Diagnostic) {
	if r.Ignored(d.Pos) || r.seen[d.Pos] {
		return
	}
	r.seen[d.Pos] = true
	d.Category = r.rule
	r.pass.Report(d)
}
