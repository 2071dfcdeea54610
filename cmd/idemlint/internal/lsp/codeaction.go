package lsp

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/idemkit/idem/analyzer"
)

// reasonPlaceholder is the reason the suppress action writes, for the
// user to replace.
const reasonPlaceholder = analyzer.ReasonPlaceholder

// codeAction answers textDocument/codeAction once the file's module is
// analyzed: for each finding in the range, "suppress with
// //idemlint:ignore <rule>" and the analyzer's suggested fixes.
func (s *server) codeAction(ctx context.Context, raw json.RawMessage) (any, *rpcError) {
	var p codeActionParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, &rpcError{codeInvalidParams, "textDocument/codeAction: " + err.Error()}
	}
	path, err := uriToPath(p.TextDocument.URI)
	if err != nil {
		return nil, &rpcError{codeInvalidParams, err.Error()}
	}
	s.remember(path, p.TextDocument.URI)
	if len(p.Context.Only) > 0 {
		ok := false
		for _, k := range p.Context.Only {
			ok = ok || k == "quickfix" || k == ""
		}
		if !ok {
			return []codeAction{}, nil
		}
	}
	s.mu.Lock()
	m := s.modules[s.rootOf(path)]
	var idle chan struct{}
	if m != nil {
		idle = m.idle
	}
	utf8 := s.utf8
	s.mu.Unlock()
	actions := []codeAction{}
	if m == nil {
		return actions, nil
	}
	// Wait for the analysis under way, so the actions match the file.
	select {
	case <-idle:
	case <-ctx.Done():
		return nil, nil
	}
	s.mu.Lock()
	rep := m.report
	s.mu.Unlock()
	if rep == nil {
		return actions, nil
	}
	conv := newConverter(utf8)
	for _, f := range rep.Findings {
		if f.Span.File != path {
			continue
		}
		d := s.findingDiagnostic(conv, f)
		if !overlaps(d.Range, p.Range) {
			continue
		}
		line := conv.line(path, f.Span.Line)
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		at := position{Line: f.Span.Line - 1}
		actions = append(actions, codeAction{
			Title:       "suppress with //idemlint:ignore " + f.Rule,
			Kind:        "quickfix",
			Diagnostics: []diagnostic{d},
			Edit: workspaceEdit{Changes: map[string][]textEdit{p.TextDocument.URI: {{
				Range:   lspRange{Start: at, End: at},
				NewText: indent + "//idemlint:ignore " + f.Rule + " " + reasonPlaceholder + "\n",
			}}}},
		})
		for _, fx := range f.Fixes {
			changes := map[string][]textEdit{}
			for _, e := range fx.Edits {
				uri := s.uriOf(e.Span.File)
				changes[uri] = append(changes[uri], textEdit{Range: conv.lspRange(e.Span), NewText: e.NewText})
			}
			actions = append(actions, codeAction{
				Title:       fx.Title,
				Kind:        "quickfix",
				Diagnostics: []diagnostic{d},
				IsPreferred: true,
				Edit:        workspaceEdit{Changes: changes},
			})
		}
	}
	return actions, nil
}

// overlaps reports whether two ranges share a position (an empty range,
// a cursor, touches the range it is in or at an end of).
func overlaps(a, b lspRange) bool {
	return !less(a.End, b.Start) && !less(b.End, a.Start)
}

func less(a, b position) bool {
	return a.Line < b.Line || a.Line == b.Line && a.Character < b.Character
}
