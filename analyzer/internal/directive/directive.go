// Package directive implements idemlint's suppression comments:
//
//	//idemlint:ignore <rule> <reason>
//
// on the line of a diagnostic or on the line above it. The reason is
// required: a directive without one suppresses nothing and is reported.
// A directive whose reason is still [Placeholder] (as the editor's
// "suppress" code action writes it) suppresses, but gives no reason: a
// driver that keeps suppressed diagnostics (see [KeepSuppressed]) says so.
package directive

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/tools/go/analysis"
)

const prefix = "//idemlint:ignore"

// Placeholder is the reason the language server's "suppress" code action
// writes, for the user to replace. It is not a reason.
const Placeholder = "TODO: say why this is safe"

// SuppressedCategory prefixes the Category of a suppressed diagnostic
// when suppressed diagnostics are kept; the rest is the directive's
// reason, empty when it has none (the placeholder).
const SuppressedCategory = "idemlint:ignore "

var keep atomic.Bool

// KeepSuppressed makes every Reporter report the diagnostics a directive
// suppresses instead of dropping them, with a Category of
// SuppressedCategory and the reason. A driver that lists suppressions
// (idemlint -json, -sarif) turns it on; analysistest and the go vet and
// golangci-lint drivers never do, and see suppressed diagnostics dropped.
func KeepSuppressed(on bool) { keep.Store(on) }

// Reason returns the reason a directive's text gives: "" for the
// placeholder, left as the code action wrote it.
func Reason(text string) string {
	text = strings.TrimSpace(text)
	if strings.HasPrefix(text, Placeholder) {
		return ""
	}
	return text
}

type key struct {
	file string
	line int
}

// Reporter reports a rule's diagnostics unless a directive suppresses them.
type Reporter struct {
	pass    *analysis.Pass
	rule    string
	ignored map[key]string // the reason, by directive line
	seen    map[token.Pos]bool
	calls   map[token.Pos]*ast.CallExpr
	// NoRelated drops related positions (see facts.Config.NoRelated).
	NoRelated bool
}

// New scans the pass's files for directives naming rule, reports those
// without a reason, and returns a Reporter for rule.
func New(pass *analysis.Pass, rule string) *Reporter {
	r := &Reporter{pass: pass, rule: rule, ignored: map[key]string{}, seen: map[token.Pos]bool{}}
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
	if len(fields) == 0 {
		return
	}
	if fields[0] != r.rule {
		if d := distance(fields[0], r.rule); d > 0 && d <= 2 {
			r.misspelled(c, fields[0])
		}
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
	reason := strings.TrimSpace(rest)
	reason = strings.TrimSpace(strings.TrimPrefix(reason, fields[0]))
	r.ignored[key{p.Filename, p.Line}] = Reason(reason)
}

// Ignored reports whether a diagnostic at pos is suppressed.
func (r *Reporter) Ignored(pos token.Pos) bool {
	_, ok := r.suppressed(pos)
	return ok
}

// suppressed returns the reason of the directive that suppresses a
// diagnostic at pos, and whether one does.
func (r *Reporter) suppressed(pos token.Pos) (string, bool) {
	p := r.pass.Fset.Position(pos)
	if reason, ok := r.ignored[key{p.Filename, p.Line}]; ok {
		return reason, true
	}
	reason, ok := r.ignored[key{p.Filename, p.Line - 1}]
	return reason, ok
}

// Report reports d unless it is suppressed or a diagnostic was already
// reported at the same position. A diagnostic at a call's Lparen (where
// SSA puts calls) is widened to the whole call, so that editors underline
// it: Pos is the call's start and End its end.
func (r *Reporter) Report(d analysis.Diagnostic) {
	reason, ignored := r.suppressed(d.Pos)
	if ignored && !keep.Load() || r.seen[d.Pos] {
		return
	}
	r.seen[d.Pos] = true
	d.Category = r.rule
	if ignored {
		d.Category = SuppressedCategory + reason
	}
	if r.NoRelated {
		d.Related = nil
	}
	if !d.End.IsValid() {
		if call := r.CallAt(d.Pos); call != nil {
			d.Pos, d.End = call.Pos(), call.End()
		}
	}
	for i, rel := range d.Related {
		if call := r.CallAt(rel.Pos); call != nil && !rel.End.IsValid() {
			d.Related[i].Pos, d.Related[i].End = call.Pos(), call.End()
		}
	}
	r.pass.Report(d)
}

// Posn prints pos as messages name positions, "file.go:line:col" (the
// file's base name), so that identical code at two places gives two
// different messages.
func (r *Reporter) Posn(pos token.Pos) string {
	p := r.pass.Fset.Position(pos)
	return filepath.Base(p.Filename) + ":" + strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column)
}

// Start returns the start of the call whose Lparen is at pos (pos itself
// when there is none): the position messages name.
func (r *Reporter) Start(pos token.Pos) token.Pos {
	if c := r.CallAt(pos); c != nil {
		return c.Pos()
	}
	return pos
}

// CallAt returns the call expression whose Lparen is at pos, or nil.
func (r *Reporter) CallAt(pos token.Pos) *ast.CallExpr {
	if r.calls == nil {
		r.calls = map[token.Pos]*ast.CallExpr{}
		for _, f := range r.pass.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					r.calls[c.Lparen] = c
				}
				return true
			})
		}
	}
	return r.calls[pos]
}

// misspelled reports a directive whose rule name is a typo of this rule,
// with a fix that corrects it (safe: it only edits the comment).
func (r *Reporter) misspelled(c *ast.Comment, word string) {
	off := len(prefix) + strings.Index(c.Text[len(prefix):], word)
	pos := c.Pos() + token.Pos(off)
	end := pos + token.Pos(len(word))
	r.pass.Report(analysis.Diagnostic{
		Pos:      pos,
		End:      end,
		Category: r.rule,
		Message:  "idemlint:ignore names no rule " + strconv.Quote(word) + "; did you mean " + r.rule + "? It suppresses nothing as written",
		SuggestedFixes: []analysis.SuggestedFix{{
			Message:   "Replace " + word + " with " + r.rule,
			TextEdits: []analysis.TextEdit{{Pos: pos, End: end, NewText: []byte(r.rule)}},
		}},
	})
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
