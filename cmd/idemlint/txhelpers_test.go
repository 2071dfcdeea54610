package main_test

import (
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/modtest"
)

// TestTxHelpers lints analyzer/testdata/mod/mint with the command:
// transactions begun by MintDB.GetTx and ended by MintDB.Commit and
// MintDB.Rollback, interface methods whose only production implementation
// (in a package the callers do not import) calls tx.Commit, beside two
// decorators that forward calls to the MintDB they wrap (they must hide
// neither the begin helper nor the commit helper), and a gorm
// service ending its transaction through PanicIfErrorWithRollback, which
// rolls back only where it panics. Every labelled line is reported, and
// nothing else.
func TestTxHelpers(t *testing.T) {
	lintLabelled(t, "mint", "txrpc", 5, 4)
}

// TestFailHelpers lints analyzer/testdata/mod/payout with the command: a
// payout service that, after a provider's error, sets a disbursement's
// Status to FAILED and writes it through a Store interface method whose
// implementation (in a package the service does not import) runs UPDATE
// .. SET status = $2 with d.Status, then tries the next provider. Every
// labelled line is reported, and nothing else.
func TestFailHelpers(t *testing.T) {
	lintLabelled(t, "payout", "timeoutfail", 3, 4)
}

// lintLabelled lints the labelled module dir of analyzer/testdata/mod
// with the command (-json, default flags) and compares the findings with
// its labels: it must hold wantN labelled lines of rule and negatives
// negative functions.
func lintLabelled(t *testing.T, dir, rule string, wantN, negatives int) {
	t.Helper()
	mod := modtest.Dir(t)
	bin := buildIdemlint(t)
	want, neg := labels(t, mod, filepath.Join(mod, dir))
	if len(want[rule]) != wantN || neg != negatives {
		t.Fatalf("%s has %d labelled %s lines and %d negative functions, want %d and %d", dir, len(want[rule]), rule, neg, wantN, negatives)
	}
	stdout, stderr, code := run(t, mod, bin, "-json", "./"+dir+"/...")
	if code != 0 {
		t.Fatalf("idemlint -json: exit %d\n%s", code, stderr)
	}
	_, notes := compare(want, findings(t, stdout))
	for _, n := range notes {
		t.Error(n)
	}
}
