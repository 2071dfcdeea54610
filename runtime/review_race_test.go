package runtime_test

// Adversarial review (h9): an operator's Resolve racing a reconciler.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idem/runtime"
)

// Promise (idemctl's safety rules): "Races lose cleanly. If a reconciler or
// a worker takes the record between the read and the claim, the claim
// fails and the resolution is refused"; Resolve never writes over a record
// it has not taken. Schedule, per round: an UNKNOWN record with a free
// lease; at once, Resolve to FAILED and a reconciler pass whose query says
// it succeeded. At most one may report that it decided the record, and the
// record must end as the one that did says.
func TestReviewResolveRacesReconciler(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		query := func(ctx context.Context, r reviewReq) (string, runtime.Outcome, error) {
			return "charged", runtime.OutcomeSucceeded, nil
		}
		if err := runtime.Register(rt, "Review.Race", query, runtime.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
		rec, err := runtime.NewReconciler(rt)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var byResolve, byReconciler int
		defer func() { t.Logf("decided by Resolve %d, by the reconciler %d", byResolve, byReconciler) }()
		for round := range 20 {
			key := fmt.Sprint("k", round)
			_, _ = runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Review.Race", Key: key, Request: reviewReq{1},
				Effect: func(ctx context.Context, r reviewReq) (string, error) { return "", context.DeadlineExceeded }})
			id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "Review.Race", Key: key}
			var wg sync.WaitGroup
			var rerr error
			var st runtime.ReconcileStats
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, rerr = runtime.Resolve(ctx, store, runtime.Resolution{ID: id, To: runtime.ResolveFailed,
					Failure: errors.New("operator: declined"), Reason: "review race", Owner: "idemctl:review"})
			}()
			go func() {
				defer wg.Done()
				st, _ = rec.RunOnce(ctx)
			}()
			wg.Wait()
			got, gerr := store.Get(ctx, id)
			if gerr != nil {
				t.Fatalf("round %d: get: %v", round, gerr)
			}
			resolved, reconciled := rerr == nil, st.Succeeded > 0
			if resolved {
				byResolve++
			}
			if reconciled {
				byReconciler++
			}
			switch {
			case resolved && reconciled:
				t.Fatalf("round %d: both the operator (FAILED) and the reconciler (SUCCESS) decided the record; it is %s", round, got.State)
			case resolved && got.State != runtime.StateFailed:
				t.Fatalf("round %d: Resolve reported FAILED, the record is %s", round, got.State)
			case reconciled && got.State != runtime.StateSuccess:
				t.Fatalf("round %d: the reconciler reported SUCCESS, the record is %s", round, got.State)
			}
		}
	})
}
