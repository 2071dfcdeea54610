package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestReadFirstAgreesWithScript sets up a record in each state a claim can
// meet, claims it reading first, and checks the answer against the claim
// script's: a record the script would leave alone is answered from the read
// with exactly the fields the script returns (which it may run again: it
// writes nothing then), and one it would create, take over, acquire or
// recognize as this call's own goes to the script and is claimed. Standalone
// and Cluster.
func TestReadFirstAgreesWithScript(t *testing.T) {
	const pause = 20 * time.Millisecond // longer than every short lease and TTL below
	type setup func(t *testing.T, s *redisstore.Store, id runtime.Identity)
	claimed := func(lease time.Duration) setup {
		return func(t *testing.T, s *redisstore.Store, id runtime.Identity) {
			mustClaim(t, s, claimP(id, "holder", lease))
		}
	}
	finished := func(to runtime.State, ttl time.Duration) setup {
		return func(t *testing.T, s *redisstore.Store, id runtime.Identity) {
			mustFinish(t, s, mustClaim(t, s, claimP(id, "holder", time.Minute)), to, ttl)
		}
	}
	ownClaim := func(t *testing.T, s *redisstore.Store, id runtime.Identity) {
		if _, err := redisstore.ClaimWithNonce(context.Background(), s, claimP(id, "holder", time.Minute), "setup"); err != nil {
			t.Fatal(err)
		}
	}
	unknown := func(t *testing.T, s *redisstore.Store, id runtime.Identity) {
		rec := mustClaim(t, s, claimP(id, "holder", time.Minute))
		if _, err := s.Transition(context.Background(), runtime.TransitionParams{ID: id, From: rec.State, Owner: rec.Owner,
			Version: rec.Version, To: runtime.StateUnknown}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		setup       setup // nil: no record
		fingerprint string
		acquire     bool
		nonce       string // "": a new one
		wantClaimed bool
	}{
		{name: "absent", fingerprint: "fp", wantClaimed: true},
		{name: "success", setup: finished(runtime.StateSuccess, time.Minute), fingerprint: "fp"},
		{name: "failed", setup: finished(runtime.StateFailed, time.Minute), fingerprint: "fp"},
		{name: "success, another request", setup: finished(runtime.StateSuccess, time.Minute), fingerprint: "other"},
		{name: "success past its TTL", setup: finished(runtime.StateSuccess, time.Millisecond), fingerprint: "other", wantClaimed: true},
		{name: "processing, live lease", setup: claimed(time.Minute), fingerprint: "fp"},
		{name: "processing, expired lease", setup: claimed(time.Millisecond), fingerprint: "fp", wantClaimed: true},
		{name: "processing, expired lease, another request", setup: claimed(time.Millisecond), fingerprint: "other"},
		{name: "processing, this call's own claim resent", setup: ownClaim, fingerprint: "fp", nonce: "setup", wantClaimed: true},
		{name: "unknown", setup: unknown, fingerprint: "fp"},
		{name: "unknown, acquired", setup: unknown, fingerprint: "fp", acquire: true, wantClaimed: true},
		{name: "unknown, acquired, another request", setup: unknown, fingerprint: "other", acquire: true},
	} {
		for _, dc := range simClients {
			t.Run(tc.name+"/"+dc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := newStore(t, dc.client(t), redisstore.WithPrefix(testPrefix(t)))
				redisstore.SetClaimOrder(s, 1)
				id := runtime.Identity{Scope: "readfirst", Operation: "T.Op", Key: "k"}
				if tc.setup != nil {
					tc.setup(t, s, id)
					time.Sleep(pause)
				}
				p := claimP(id, "caller", time.Minute)
				p.Fingerprint, p.AcquireUnknown = []byte(tc.fingerprint), tc.acquire
				if tc.nonce == "setup" {
					p.Owner = "holder"
				}
				nonce := tc.nonce
				if nonce == "" {
					nonce = "call-" + tc.name
				}
				before := mustGetOrNone(t, s, id)
				got, err := redisstore.ClaimWithNonce(ctx, s, p, nonce)
				if err != nil {
					t.Fatal(err)
				}
				if got.Claimed != tc.wantClaimed {
					t.Fatalf("claimed = %v, want %v (record %+v)", got.Claimed, tc.wantClaimed, got.Record)
				}
				if got.Claimed {
					return
				}
				want, err := redisstore.ClaimByScript(ctx, s, p, nonce)
				if err != nil {
					t.Fatal(err)
				}
				if want.Claimed {
					t.Fatal("the script claimed a record the read answered as not claimable")
				}
				if g, w := recText(got.Record), recText(want.Record); g != w {
					t.Errorf("read answered\n  %s\nthe script\n  %s", g, w)
				}
				if g, w := recText(got.Record), recText(before); g != w {
					t.Errorf("the record changed: before\n  %s\nafter\n  %s", w, g)
				}
				if got.Record.StoreNow.IsZero() || got.Record.StoreNow.After(want.Record.StoreNow) {
					t.Errorf("StoreNow %v, the script's right after %v", got.Record.StoreNow, want.Record.StoreNow)
				}
			})
		}
	}
}

// recText is every field of rec but StoreNow.
func recText(rec runtime.Record) string {
	rec.StoreNow = time.Time{}
	return fmt.Sprintf("%+v", rec)
}

func mustGetOrNone(t *testing.T, s runtime.Store, id runtime.Identity) runtime.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if err != nil && err != runtime.ErrNotFound {
		t.Fatal(err)
	}
	return rec
}
