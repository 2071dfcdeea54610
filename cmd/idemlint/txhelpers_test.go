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
	mod := modtest.Dir(t)
	bin := buildIdemlint(t)
	want, negatives := labels(t, mod, filepath.Join(mod, "mint"))
	if len(want["txrpc"]) != 5 || negatives != 4 {
		t.Fatalf("mint has %d labelled txrpc lines and %d negative functions, want 5 and 4", len(want["txrpc"]), negatives)
	}
	stdout, stderr, code := run(t, mod, bin, "-json", "./mint/...")
	if code != 0 {
		t.Fatalf("idemlint -json: exit %d\n%s", code, stderr)
	}
	_, notes := compare(want, findings(t, stdout))
	for _, n := range notes {
		t.Error(n)
	}
}
