package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestClaimAfterReadMissJudgesTheRecordFound: a claim whose read found no
// record (a sweep deleted it between two of the claim's steps) inserts; when
// a concurrent claim inserted the identity first, the claim must judge the
// record it then finds like any other: take a free UNKNOWN record (with
// AcquireUnknown), an expired lease or a finished record past its TTL, and
// leave only a live one. In group-commit mode the batched insert returns the
// existing record instead of failing, and the claim returned it untaken
// (load series 12, TestSimulationGroupCommit seed 3248224416597893853: a
// claim told "not claimed" of a free UNKNOWN record it had to acquire).
func TestClaimAfterReadMissJudgesTheRecordFound(t *testing.T) {
	p := testPool(t)
	ctx := scopedCtx(t.Name())
	fp := runtime.Fingerprint([]byte(`{}`))
	other := pgstore.New(p)
	claim := func(t *testing.T, id runtime.Identity, owner string, lease time.Duration) runtime.Record {
		t.Helper()
		res, err := other.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: []byte(`{}`), Owner: owner, Lease: lease})
		if err != nil || !res.Claimed {
			t.Fatalf("claim by %s: %+v, %v", owner, res, err)
		}
		return res.Record
	}
	finish := func(t *testing.T, rec runtime.Record, to runtime.State, ttl time.Duration) {
		t.Helper()
		if _, err := other.Transition(ctx, runtime.TransitionParams{ID: rec.ID, From: runtime.StateProcessing, Owner: rec.Owner,
			Version: rec.Version, To: to, TTL: ttl, Response: []byte(`{}`)}); err != nil {
			t.Fatalf("%s: %v", to, err)
		}
	}
	cases := []struct {
		name    string
		install func(t *testing.T, id runtime.Identity) // the concurrent claim's record
		claimed bool
		state   runtime.State
	}{
		{"free UNKNOWN", func(t *testing.T, id runtime.Identity) {
			finish(t, claim(t, id, "w3", 10*time.Second), runtime.StateUnknown, 0)
		}, true, runtime.StateUnknown},
		{"expired lease", func(t *testing.T, id runtime.Identity) {
			claim(t, id, "w3", 30*time.Millisecond)
			time.Sleep(80 * time.Millisecond)
		}, true, runtime.StateProcessing},
		{"SUCCESS past its TTL", func(t *testing.T, id runtime.Identity) {
			finish(t, claim(t, id, "w3", 10*time.Second), runtime.StateSuccess, time.Millisecond)
			time.Sleep(50 * time.Millisecond)
		}, true, runtime.StateProcessing},
		{"live lease", func(t *testing.T, id runtime.Identity) {
			claim(t, id, "w3", 10*time.Second)
		}, false, runtime.StateProcessing},
	}
	modes := []struct {
		name string
		new  func() *pgstore.Store
	}{
		{"group commit", func() *pgstore.Store { return pgstore.New(p, pgstore.WithGroupCommit(0)) }},
		{"read first", func() *pgstore.Store { s := pgstore.New(p); pgstore.SetClaimOrder(s, 1); return s }},
		{"insert first", func() *pgstore.Store { s := pgstore.New(p); pgstore.SetClaimOrder(s, -1); return s }},
	}
	for _, m := range modes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				id, err := runtime.NewIdentity(ctx, "T.ReadMiss", strings.ReplaceAll(m.name+"/"+c.name, " ", "-"))
				if err != nil {
					t.Fatal(err)
				}
				// A finished record past its TTL, which the claim reads
				// and goes to replace; a sweep deletes it first.
				finish(t, claim(t, id, "w0", 10*time.Second), runtime.StateSuccess, time.Millisecond)
				time.Sleep(20 * time.Millisecond)
				s := m.new()
				swept, installed := false, false
				pgstore.SetBeforeTakeover(s, func() {
					if swept {
						return
					}
					swept = true
					if _, err := p.Exec(ctx, `DELETE FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3`,
						id.Scope, id.Operation, id.Key); err != nil {
						t.Errorf("sweep: %v", err)
					}
				})
				pgstore.SetAfterReadMiss(s, func() {
					if installed {
						return
					}
					installed = true
					c.install(t, id)
				})
				res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: []byte(`{}`), Owner: "w2",
					Lease: 10 * time.Second, AcquireUnknown: true})
				if err != nil {
					t.Fatal(err)
				}
				if !swept || !installed {
					t.Fatalf("the schedule did not run: swept %v, installed %v", swept, installed)
				}
				if res.Claimed != c.claimed || res.Record.State != c.state {
					t.Fatalf("claimed %v %s (owner %q, v%d), want claimed %v %s", res.Claimed, res.Record.State,
						res.Record.Owner, res.Record.Version, c.claimed, c.state)
				}
				if want := map[bool]string{true: "w2", false: "w3"}[c.claimed]; res.Record.Owner != want {
					t.Fatalf("owner %q, want %q", res.Record.Owner, want)
				}
			})
		}
	}
}
