package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// docs/redisstore.md "Recognised retries": "A resend that arrives after
// another worker claimed or acquired the record (...) finds its write in lt
// and gets the version it wrote". Schedule: w1 records SUCCESS with a short
// TTL; its reply is lost; the TTL passes and w2 claims the key (the expired
// record is replaced); go-redis's resend of w1's transition (the same
// token) arrives.
func TestR51ResentTransitionAfterReplacingClaim(t *testing.T) {
	for name, c := range r23Clients(t) {
		t.Run(name, func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				ctx := context.Background()
				s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
				id := runtime.Identity{Scope: "tenant", Operation: "R51.Replace", Key: "k"}
				cr, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte("rq"), Owner: "w1", Lease: time.Minute})
				if err != nil || !cr.Claimed {
					t.Errorf("claim: %+v, %v", cr, err)
					return
				}
				tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1", Version: cr.Record.Version,
					To: runtime.StateSuccess, TTL: 20 * time.Millisecond, Response: []byte(`"ok"`), Token: "w1#outcome-1"}
				v1, err := s.Transition(ctx, tp)
				if err != nil {
					t.Errorf("transition: %v", err)
					return
				}
				time.Sleep(100 * time.Millisecond)
				cr2, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte("rq"), Owner: "w2", Lease: time.Minute})
				if err != nil || !cr2.Claimed {
					t.Errorf("schedule not reached: w2's claim of the expired record: %+v, %v", cr2, err)
					return
				}
				v, err := s.Transition(ctx, tp) // the resend
				if err != nil || v != v1 {
					t.Errorf("resent transition after another worker claimed the (expired) record: version %d, %v; want %d (its own write, applied)", v, err, v1)
				}
			})
		})
	}
}
