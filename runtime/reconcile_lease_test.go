package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestReconcilerAsksUnderALiveLease: a batch's records are asked one after
// another under the lease they were acquired with; two slow queries first
// (each cut off at its deadline) use more than that lease, and the third
// record's query must still run while the reconciler holds the record (its
// lease renewed), never after another reconciler could acquire it.
func TestReconcilerAsksUnderALiveLease(t *testing.T) {
	s := memstore.New()
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const op, lease = "T.LateInBatch", 300 * time.Millisecond
	var mu sync.Mutex
	seen := map[string]string{}
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if req != "last" {
			time.Sleep(lease) // ignores its context: cut off at its deadline
			return 0, runtime.OutcomeUnknown, nil
		}
		rec, err := s.Get(context.Background(), runtime.Identity{Operation: op, Key: req})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			seen[req] = err.Error()
		case rec.Owner != "rec" || !rec.LeaseLive():
			seen[req] = "asked with the record's lease expired (owner " + rec.Owner + ", lease " + rec.LeaseExpiresAt.Sub(rec.StoreNow).String() + ")"
		default:
			seen[req] = "ok"
		}
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slow-1", "slow-2", "last"} {
		r23Unknown(t, rt, op, k)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileLease(lease), runtime.ReconcileOwner("rec"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if took := time.Since(start); seen["last"] != "ok" {
		t.Fatalf("the batch's last record: %q (the pass took %v, lease %v)", seen["last"], took, lease)
	}
}
