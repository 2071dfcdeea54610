package timeoutfail_test

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemkit/idem/analyzer/internal/ruletest"
	"github.com/idemkit/idem/analyzer/timeoutfail"
	"github.com/idemkit/idem/internal/modtest"
)

// testdata is the GOPATH shared by the analyzers' tests (stubs once).
var testdata = filepath.Join(analysistest.TestData(), "..", "..", "testdata")

// rules is the one analysistest run of the default configuration on every
// package of the tests below (one load of their dependencies), the fixes
// checked against their golden files.
var rules = &ruletest.Shared{
	Dir:      testdata,
	Analyzer: func() *analysis.Analyzer { return timeoutfail.New(timeoutfail.Config{}) },
	Patterns: []string{"t", "tk", "timeoutfailfix", "tflow"},
	Fix:      true,
}

func TestTimeoutfail(t *testing.T) {
	results := rules.Results(t, "t")
	// Every finding points at the network call whose error it is, and at the
	// leaf call when the chain ends in this package.
	n := 0
	for _, r := range results {
		for _, d := range r.Diagnostics {
			if strings.HasPrefix(d.Message, "idemlint:ignore") {
				continue
			}
			n++
			if len(d.Related) == 0 || !strings.HasPrefix(d.Related[0].Message, "the network call whose error this is: ") || !d.Related[0].Pos.IsValid() {
				t.Errorf("%v: related = %+v", r.Pass.Fset.Position(d.Pos), d.Related)
			}
		}
	}
	if n < 15 {
		t.Errorf("%d findings, want at least 15", n)
	}
}

// TestTimeoutfailTokenHelper: token deletes behind generic names (a helper
// named for the delete, a key from a function that builds idempotency
// keys), with the defaults and with -tokendels naming the helper; the
// errors of Redis reads reach the delete in neither.
func TestTimeoutfailTokenHelper(t *testing.T) {
	rules.Results(t, "tk")
	a := timeoutfail.New(timeoutfail.Config{})
	if err := a.Flags.Set("tokendels", "(*tk.Handler).deleteIdempotencyKey"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, testdata, a, "tk")
}

// TestTimeoutfailFix: a misspelled rule name in a suppression directive is
// reported with a fix that corrects it.
func TestTimeoutfailFix(t *testing.T) {
	rules.Results(t, "timeoutfailfix")
}

// TestTimeoutfailORM: failure actions written through gorm, bun and sqlx
// (the real libraries), helpers and interfaces.
func TestTimeoutfailORM(t *testing.T) {
	analysistest.Run(t, modtest.Dir(t), timeoutfail.New(timeoutfail.Config{}), "./timeoutfail/...")
}

// TestTimeoutfailDataFlow: FAILED written through SQL text in a query
// struct, fmt.Sprintf or a squirrel update builder (in a chain, through
// ToSql, in a variable), and through repository methods of another package
// (trepo) given the status as a parameter or as a field of a struct set
// before the call, directly or through a setter method (FieldSet), also
// in an embedded struct (Transfer's Record.Status). Silent: a status set
// on one path only, by a setter of another state or by a method that is
// not a setter, an embedded struct replaced or handed on after the store,
// a method that writes no status, a status read only in a WHERE, a
// builder whose status differs by path. trepo's facts are checked by
// analyzer/facts's TestStatusWriters.
func TestTimeoutfailDataFlow(t *testing.T) {
	rules.Results(t, "tflow")
}
