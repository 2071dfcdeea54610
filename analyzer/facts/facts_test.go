package facts_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/facts"
	"github.com/idemkit/idem/analyzer/internal/ruletest"
)

// testdata is the GOPATH shared by the analyzers' tests (stubs once).
var testdata = filepath.Join(analysistest.TestData(), "..", "..", "testdata")

// TestFacts checks the facts exported for a chain of packages fa -> fb -> fc:
// network I/O two packages away, runners, timeout checks, failure actions,
// status writers, token deletes and claims, transaction closers (also
// per error argument) and functions that never return.
// shared is the one analysistest run of the default configuration on the
// packages of the tests below (one load of their dependencies).
var shared = &ruletest.Shared{
	Dir:      testdata,
	Analyzer: func() *analysis.Analyzer { return facts.New(facts.Config{}).Analyzer },
	Patterns: []string{"fa", "fb", "fc", "trepo"},
}

func TestFacts(t *testing.T) {
	shared.Results(t, "fa", "fb", "fc")
}

// TestStatusWriters checks the StatusWriter facts of a repository whose
// methods write a parameter, or a field of one, into a status column
// through SQL (a local variable's text, $n and ? placeholders) or gorm; a
// status read only in a WHERE is not written; a status promoted from an
// embedded struct is written as its path (Record.Status). Its setters'
// FieldSet facts too: a method that sets the status on some paths only,
// reads it, or hands the struct on is not a setter.
func TestStatusWriters(t *testing.T) {
	shared.Results(t, "trepo")
}
