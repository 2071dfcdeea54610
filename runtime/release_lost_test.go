package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestReleaseFindingATakeoverIsLeaseLost: an effect fails (retryable) after
// another worker took its record over; the release of the claim finds the
// record no longer this attempt's on its first try. The caller is told
// ErrLeaseLost (the other worker decides the outcome), never the effect's
// own error as if the key had been freed, and the other worker's claim is
// left alone. (A release that finds the record gone on a retry, its first
// try's reply lost, counts as done: that is another case.)
func TestReleaseFindingATakeoverIsLeaseLost(t *testing.T) {
	st := memstore.New()
	rt, err := runtime.New(st, runtime.WithOwner("first"), runtime.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	errBusy := errors.New("downstream busy")
	var id runtime.Identity
	_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Op", Key: "k", Request: "r",
		Effect: func(ctx context.Context, req string) (string, error) {
			a, _ := runtime.AttemptFrom(ctx)
			id = a.ID
			// The lease is taken from this attempt (an operator released
			// the record, another worker claimed the key at once).
			if err := st.Release(ctx, runtime.ReleaseParams{ID: a.ID, State: runtime.StateProcessing, Owner: "first", Version: a.FencingToken}); err != nil {
				t.Errorf("release under the effect: %v", err)
			}
			fp, body, err := runtime.EncodeRequest(rt, req, nil)
			if err != nil {
				t.Error(err)
			}
			if res, err := st.Claim(ctx, runtime.ClaimParams{ID: a.ID, Fingerprint: fp, Request: body, Owner: "second", Lease: time.Minute}); err != nil || !res.Claimed {
				t.Errorf("the second worker's claim: %+v, %v", res, err)
			}
			return "", runtime.Retryable(errBusy)
		}})
	if !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("Do: %v, want ErrLeaseLost", err)
	}
	rec, gerr := st.Get(ctx, id)
	if gerr != nil || rec.Owner != "second" || rec.State != runtime.StateProcessing {
		t.Fatalf("record after the call: %+v, %v; want the second worker's claim", rec, gerr)
	}
}
