package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestResentTransitionAfterAcquire: go-redis resends a script whose reply it
// did not get; between the first run and the resend another worker can
// write the record. Here the first run records UNKNOWN, a reconciler
// acquires the record (a new version and owner), and then the resend
// arrives: it must report its own applied write (the version it wrote), not
// ErrLeaseLost. Before the fix the caller of a recorded UNKNOWN outcome was
// told "another worker took over before this attempt finished" (the CI
// failure of stop 52, TestConformanceResentScripts/Reconcile/RunStopsOnCancel).
func TestResentTransitionAfterAcquire(t *testing.T) {
	for name, c := range r23Clients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
			// unknown claims key as w1 and records UNKNOWN with token.
			unknown := func(key, token string) (runtime.TransitionParams, int64) {
				id := runtime.Identity{Scope: "tenant", Operation: "Resend.Window", Key: key}
				cr, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte("rq"), Owner: "w1", Lease: time.Minute})
				if err != nil || !cr.Claimed {
					t.Fatalf("claim: %+v, %v", cr, err)
				}
				tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1", Version: cr.Record.Version,
					To: runtime.StateUnknown, Token: token}
				v, err := s.Transition(ctx, tp)
				if err != nil {
					t.Fatal(err)
				}
				return tp, v
			}
			tp, v1 := unknown("k", "w1#outcome-1")
			id := tp.ID
			recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler", Lease: time.Minute, Limit: 10})
			if err != nil || len(recs) != 1 || recs[0].Version == v1 {
				t.Fatalf("acquire: %+v, %v", recs, err)
			}
			// The resend of the first write, after the reconciler's.
			v, err := s.Transition(ctx, tp)
			if err != nil || v != v1 {
				t.Fatalf("resent transition after a reconciler acquired the record: version %d, %v; want %d (its own write, applied)", v, err, v1)
			}
			// A write that was never applied is still refused.
			other := tp
			other.Token = "w1#outcome-2"
			if _, err := s.Transition(ctx, other); !errors.Is(err, runtime.ErrLeaseLost) {
				t.Fatalf("a write never applied, at an old version: %v, want ErrLeaseLost", err)
			}
			// The reconciler still owns the record, unchanged by the resend.
			rec, err := s.Get(ctx, id)
			if err != nil || rec.Owner != "reconciler" || rec.Version != recs[0].Version || rec.State != runtime.StateUnknown {
				t.Fatalf("record after the resend: %+v, %v", rec, err)
			}
			// A takeover by claim keeps the recognition too.
			tp2, v2 := unknown("k2", "w1#outcome-3")
			cr, err := s.Claim(ctx, runtime.ClaimParams{ID: tp2.ID, Fingerprint: []byte("fp"), Request: []byte("rq"), Owner: "w2", Lease: time.Minute, AcquireUnknown: true})
			if err != nil || !cr.Claimed {
				t.Fatalf("claim of the UNKNOWN record: %+v, %v", cr, err)
			}
			if v, err := s.Transition(ctx, tp2); err != nil || v != v2 {
				t.Fatalf("resent transition after a claim took the record: version %d, %v; want %d", v, err, v2)
			}
		})
	}
}
