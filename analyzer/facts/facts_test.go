package facts_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/facts"
)

// TestFacts checks the facts exported for a chain of packages fa -> fb -> fc:
// network I/O two packages away, runners, timeout checks, failure actions,
// status writers, token deletes and claims, transaction closers.
func TestFacts(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), facts.New(facts.Config{}).Analyzer, "fa", "fb", "fc")
}
