package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestReconcilerQueryEndsWithItsLease: the reconciler holds an acquired
// record for its lease (ReconcileLease) while the query runs; a query that
// hangs must be cancelled by the time that lease ends, whatever the
// runtime's query timeout, or it would still be asking the downstream
// while another reconciler, having acquired the record at the lease's
// end, asks too (and acts on an older answer).
func TestReconcilerQueryEndsWithItsLease(t *testing.T) {
	st := memstore.New()
	rt, err := runtime.New(st, runtime.WithQueryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// An UNKNOWN record: the effect timed out.
	_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Op.Q", Key: "k", Request: "r",
		Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
	}
	const lease = 300 * time.Millisecond
	var ran time.Duration
	if err := runtime.Register(rt, "Op.Q", func(ctx context.Context, _ string) (string, runtime.Outcome, error) {
		start := time.Now()
		<-ctx.Done() // a downstream that never answers
		ran = time.Since(start)
		return "", runtime.OutcomeUnknown, context.Cause(ctx)
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.RunOnce(ctx); err != nil {
		t.Logf("RunOnce: %v", err)
	}
	if ran == 0 {
		t.Fatalf("the query never ran (RunOnce took %v)", time.Since(start))
	}
	// It is cancelled at the lease's end; half a lease more is for a
	// loaded machine's timers.
	if ran > lease+lease/2 {
		t.Fatalf("the query ran %v, past the reconciler's lease of %v", ran.Round(time.Millisecond), lease)
	}
}
