package idemops_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/idemops"
)

// TestFacts reads the services of bypass's cases in the shared testdata.
func TestFacts(t *testing.T) {
	td, err := filepath.Abs(filepath.Join("..", "..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, td, idemops.Analyzer, "bpsvc")
}
