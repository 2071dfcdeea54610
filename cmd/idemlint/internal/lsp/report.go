// Package lsp is idemlint's language server: LSP 3.17 over a byte stream
// (stdio), JSON-RPC 2.0 with Content-Length framing. It publishes the
// findings of the command's own driver, which it is given as a [LintFunc]:
// the server does not analyze code itself, so that its findings are the
// command's.
//
// Analysis runs per root: the directory of the nearest go.mod of an open
// file, or the workspace folder inside that module that holds the file
// (what 'idemlint ./...' run there analyzes), when a file is opened or saved and when the client reports a
// file changed on disk, debounced, one module at a time. Diagnostics are
// published for the files of the packages (directories) that have an open
// file; each such file gets a list, empty when it has no finding.
package lsp

import (
	"context"
	"encoding/json"
	"io"
	"time"
)

// Span is a source range as go/token prints it: a file's absolute path, a
// 1-based line and a 1-based byte column; End is the end (exclusive).
type Span struct {
	File            string
	Line, Col       int
	EndLine, EndCol int
}

// Finding is one diagnostic of a rule.
type Finding struct {
	Rule    string
	Message string
	Span    Span
	Related []Related
	Fixes   []Fix
}

// Related is a position a finding names, with what it is.
type Related struct {
	Span    Span
	Message string
}

// Fix is an analyzer's suggested fix.
type Fix struct {
	Title string
	Edits []Edit
}

// Edit replaces Span with NewText.
type Edit struct {
	Span    Span
	NewText string
}

// LoadError is a package that did not load (it does not parse or
// type-check, go.mod is broken...). Span.File is "" when the error has no
// position.
type LoadError struct {
	Span    Span
	Message string
}

// Report is what one analysis of a module found.
type Report struct {
	Findings []Finding
	Errors   []LoadError
	// NotAnalyzed holds the directories of the packages that were not
	// analyzed because they or their imports did not load.
	NotAnalyzed []string
	// Reused says that no input changed since the last analysis, whose
	// report this is.
	Reused bool
}

// LintFunc analyzes the packages in and below dir, as 'idemlint ./...' run
// there: dir is a module's root, or the workspace folder inside a module
// that holds the open file. options is the client's initializationOptions, null when it sent none.
// It returns an error only when nothing could be analyzed; the error is
// then published at the module's go.mod.
type LintFunc func(ctx context.Context, dir string, options json.RawMessage) (*Report, error)

// Config is what the server needs from the command.
type Config struct {
	Lint LintFunc
	// Headline is a rule's one-line summary, the first line of its
	// diagnostics' messages.
	Headline func(rule string) string
	// DocURL is a rule's documentation page.
	DocURL  func(rule string) string
	Version string
	// Debounce is how long the server waits after the last event of a
	// module before analyzing it (200 ms when zero).
	Debounce time.Duration
	// Log receives the server's log (stderr; editors show it in their LSP
	// log), or nil.
	Log io.Writer
}
