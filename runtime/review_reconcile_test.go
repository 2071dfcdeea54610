package runtime_test

// Adversarial review (h9): the reconciler's no-query policy and
// runtime.Resolve against a worker whose lease is live.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
)

// Promise: a NoQueryPolicy resolves "UNKNOWN (and dead PROCESSING)
// records After their claim"; idemctl's "live leases are refused". Attack:
// a policy window (After) much shorter than the effect, whose worker is
// alive and renewing: a reconciler pass and an operator's release while
// the effect runs must take nothing, and a duplicate must never run the
// effect.
func TestReviewNoQueryPolicyAndResolveSpareLiveLease(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithLease(600*time.Millisecond), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := runtime.RegisterNoQuery(rt, "Review.NoQuery", runtime.NoQueryPolicy{After: 50 * time.Millisecond, Resolve: runtime.NotHappenedRelease}); err != nil {
			t.Fatal(err)
		}
		rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(3))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects atomic.Int32
		call := runtime.Call[reviewReq, string]{Operation: "Review.NoQuery", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				if effects.Add(1) > 1 {
					return "second", nil
				}
				select {
				case <-time.After(1500 * time.Millisecond):
					return "first", nil
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			}}
		starved := stall.Start()
		done := make(chan error, 1)
		go func() { _, err := runtime.Do(ctx, rt, call); done <- err }()
		id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "Review.NoQuery", Key: "k1"}
		var errs []error
		for i := 0; i < 3; i++ {
			time.Sleep(300 * time.Millisecond)
			st, err := rec.RunOnce(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("reconciler: %w", err))
			}
			_, rerr := runtime.Resolve(ctx, store, runtime.Resolution{ID: id, To: runtime.ResolveReleased, Reason: "review", Owner: "idemctl:review"})
			_, derr := runtime.Do(ctx, rt, call)
			t.Logf("pass %d: reconciler %+v; resolve: %v; duplicate: %v", i, st, rerr, derr)
			if rerr == nil || !errors.Is(rerr, runtime.ErrNotResolvable) {
				errs = append(errs, fmt.Errorf("pass %d: resolve of a live record: %v; want refused", i, rerr))
			}
		}
		err = <-done
		// A 600 ms lease is kept by renewals every 200 ms: a process that
		// did not run for a third of the lease (a machine with every core
		// busy) loses it, and the lease rule stops the effect; the record is
		// then no longer live, and a duplicate may run the effect once more
		// after it. Only a process that ran on time must keep it.
		if worst := starved.Stop(); errors.Is(err, runtime.ErrLeaseLost) && worst >= 200*time.Millisecond {
			if n := effects.Load(); n > 2 {
				t.Fatalf("effect ran %d times with one lease lost", n)
			}
			t.Logf("the lease was lost while the process stalled for up to %v (the machine's load): not counted: %v; %v", worst, err, errs)
			return
		}
		for _, e := range errs {
			t.Error(e)
		}
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		if n := effects.Load(); n != 1 {
			t.Fatalf("effect ran %d times while its worker was alive", n)
		}
	})
}
