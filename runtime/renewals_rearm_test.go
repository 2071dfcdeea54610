package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestRenewalsRearmForAnEarlierRound: one runtime has a call in flight
// whose first renewal is 20 minutes away (a one-hour lease), then starts a
// call with a 600ms lease whose effect runs 1.2s. The runtime's one
// renewal timer must be moved earlier for the short call: its lease is
// renewed in the store while its effect runs, and the effect runs to its
// end.
func TestRenewalsRearmForAnEarlierRound(t *testing.T) {
	st := memstore.New()
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	release := make(chan struct{})
	hourDone := make(chan error, 1)
	go func() {
		_, err := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Op.Hour", Key: "h", Lease: time.Hour,
			Effect: func(context.Context, string) (string, error) { <-release; return "", nil }})
		hourDone <- err
	}()
	defer func() { close(release); <-hourDone }()
	for n, _ := runtime.RenewalsScheduled(rt); n == 0; n, _ = runtime.RenewalsScheduled(rt) {
		time.Sleep(time.Millisecond) // the hour call's first round is in the timer
	}
	const lease = 600 * time.Millisecond
	var renewed bool
	_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Op.Short", Key: "s", Lease: lease,
		Effect: func(ctx context.Context, _ string) (string, error) {
			a, _ := runtime.AttemptFrom(ctx)
			first, err := st.Get(ctx, a.ID)
			if err != nil {
				return "", err
			}
			select {
			case <-time.After(2 * lease):
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
			now, err := st.Get(ctx, a.ID)
			if err != nil {
				return "", err
			}
			renewed = now.LeaseExpiresAt.After(first.LeaseExpiresAt)
			return "done", nil
		}})
	if err != nil {
		t.Fatalf("the short call: %v (its lease was not renewed in time)", err)
	}
	if !renewed {
		t.Fatal("the short call's lease was never renewed in the store")
	}
}
