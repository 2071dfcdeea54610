package tokenorder_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/tokenorder"
)

func TestTokenorder(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), tokenorder.New(tokenorder.Config{}), "k")
}

func TestTokenorderTables(t *testing.T) {
	a := tokenorder.New(tokenorder.Config{})
	if err := a.Flags.Set("tables", "request_log"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, analysistest.TestData(), a, "kcfg")
}
