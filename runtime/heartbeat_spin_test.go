package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// refusesRenewals refuses every renewal once refuse is set, and ends the
// lease after limit of them (a guard: a heartbeat that spins would
// otherwise never let the test end).
type refusesRenewals struct {
	runtime.Store
	refuse  atomic.Bool
	renews  atomic.Int64
	limit   int64
	spinned atomic.Bool
}

func (s *refusesRenewals) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if !s.refuse.Load() {
		return s.Store.Renew(ctx, p)
	}
	if s.renews.Add(1) > s.limit {
		s.spinned.Store(true)
		return time.Time{}, runtime.ErrLeaseLost
	}
	return time.Time{}, errors.New("renew: connection refused")
}

// TestQueryHeartbeatDoesNotSpinAtItsDeadline: a query's heartbeat (which
// keeps renewing when its lease cannot be confirmed, having no effect to
// stop) whose round ends exactly when the lease stops being known to hold
// must start the next round as a late one. It started a round whose
// deadline had already come, which ended at once and scheduled the next
// at the same instant, forever: on a virtual clock (the simulation's
// synctest bubble) time never moved again; on a real one it spun until
// the clock ticked.
func TestQueryHeartbeatDoesNotSpinAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 2 * time.Second
		store := &refusesRenewals{Store: memstore.New(), limit: 10000}
		rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		call := func(effect func(context.Context, string) (string, error), query runtime.QueryFunc[string, string]) (string, error) {
			return runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Spin.Op", Key: "k", Request: "r", Effect: effect, Query: query})
		}
		// The first attempt times out: UNKNOWN.
		_, err = call(func(context.Context, string) (string, error) {
			return "", fmt.Errorf("downstream: %w", context.DeadlineExceeded)
		}, nil)
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatalf("first attempt: %v, want ErrOutcomeUnknown", err)
		}
		// A retry with a query takes it for reconciliation; the query
		// outlasts the lease while every renewal is refused.
		store.refuse.Store(true)
		_, err = call(func(context.Context, string) (string, error) { return "done", nil },
			func(ctx context.Context, _ string) (string, runtime.Outcome, error) {
				select {
				case <-time.After(2 * lease):
				case <-ctx.Done():
					return "", runtime.OutcomeUnknown, context.Cause(ctx)
				}
				return "done", runtime.OutcomeSucceeded, nil
			})
		if store.spinned.Load() {
			t.Fatalf("the query's heartbeat renewed %d times within %v: it spun at its deadline (the retry returned %v)", store.renews.Load(), 2*lease, err)
		}
		t.Logf("%d renewals refused during a query of two leases; the retry returned %v", store.renews.Load(), err)
	})
}
