package main_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
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
// negative functions. It returns the -json output.
func lintLabelled(t *testing.T, dir, rule string, wantN, negatives int) string {
	t.Helper()
	mod := modtest.Dir(t)
	bin := idemlintBinary(t)
	want, neg := labels(t, mod, filepath.Join(mod, dir))
	if len(want[rule]) != wantN || neg != negatives {
		t.Fatalf("%s has %d labelled %s lines and %d negative functions, want %d and %d", dir, len(want[rule]), rule, neg, wantN, negatives)
	}
	stdout, stderr, code := run(t, mod, bin, "-json", "./"+dir+"/...")
	if code != 0 {
		t.Fatalf("idemlint -json: exit %d\n%s", code, stderr)
	}
	_, notes := compare(want, findings(t, stdout, ""))
	for _, n := range notes {
		t.Error(n)
	}
	return stdout
}

// TestHandoffs lints analyzer/testdata/mod/hooks with the command: a
// webhook manager, reached through its interface from a helper package,
// queues jobs on a channel and starts a worker goroutine whose Webhook
// (an interface: two implementations embedding an HTTP BaseWebhook) POSTs
// them. Every labelled line is reported, the outbox and the after-commit
// call are not, and each finding, in text, -json and -sarif, is a hand-off
// that names the goroutine and the worker's network call, with the outbox
// advice and not the PROCESSING recipe.
func TestHandoffs(t *testing.T) {
	// The -json output is checked below as well (one run: about 1 s of
	// CPU each).
	jsonOut := lintLabelled(t, "hooks", "txrpc", 2, 2)
	mod := modtest.Dir(t)
	bin := idemlintBinary(t)
	check := func(format, msg string) {
		t.Helper()
		for _, want := range []string{
			"hands work to another goroutine (a goroutine started at webhooks.go:",
			"(*webhooks.Worker).Run -> (*webhooks.Worker).trigger -> (webhooks.Webhook).Trigger -> ",
			"leaf call (*http.Client).Do at webhooks.go:",
			"a hand-off before the database transaction run by the call at handler.go:",
			"a dual write",
			"write the event to an outbox table in the same transaction",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message lacks %q:\n%s", format, want, msg)
			}
		}
		if strings.Contains(msg, "PROCESSING") || strings.Contains(msg, "a send on a channel") {
			t.Errorf("%s: a hand-off with the network-call recipe or the channel as its leaf:\n%s", format, msg)
		}
	}
	stdout, stderr, _ := run(t, mod, bin, "./hooks/...")
	n := 0
	for _, line := range strings.Split(stdout+stderr, "\n") {
		if strings.Contains(line, "(txrpc)") {
			n++
			check("text", line)
		}
	}
	if n != 2 {
		t.Errorf("text: %d txrpc findings, want 2:\n%s%s", n, stdout, stderr)
	}
	stdout = jsonOut
	var tree map[string]map[string][]struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
		t.Fatal(err)
	}
	n = 0
	for _, byRule := range tree {
		for _, d := range byRule["txrpc"] {
			n++
			check("json", d.Message)
		}
	}
	if n != 2 {
		t.Errorf("-json: %d txrpc findings, want 2", n)
	}
	stdout, _, _ = run(t, mod, bin, "-sarif", "./hooks/...")
	var log struct {
		Runs []struct {
			Results []struct {
				RuleID  string `json:"ruleId"`
				Message struct {
					Text string `json:"text"`
				} `json:"message"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stdout), &log); err != nil || len(log.Runs) != 1 {
		t.Fatalf("sarif: %v\n%s", err, stdout)
	}
	n = 0
	for _, r := range log.Runs[0].Results {
		if r.RuleID == "txrpc" {
			n++
			check("sarif", r.Message.Text)
		}
	}
	if n != 2 {
		t.Errorf("-sarif: %d txrpc results, want 2", n)
	}
}
