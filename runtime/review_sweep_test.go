package runtime_test

// Adversarial review (h9): TTL and the sweeper against UNKNOWN records.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Promise: "Finished records expire after their TTL and are swept;
// PROCESSING with a live lease and UNKNOWN records never are" (Redis:
// "PROCESSING and UNKNOWN never expire"). Schedule: a runtime with a 50ms
// TTL; the effect times out after applying (UNKNOWN); wait past the TTL,
// sweep; a duplicate without a query must still be told ErrOutcomeUnknown
// and never run the effect.
func TestReviewUnknownOutlivesTTLAndSweep(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithTTL(50*time.Millisecond), runtime.WithLease(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		sw, err := runtime.NewSweeper(rt)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects atomic.Int32
		call := runtime.Call[reviewReq, string]{Operation: "Review.Sweep", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				effects.Add(1)
				return "", context.DeadlineExceeded
			}}
		_, _ = runtime.Do(ctx, rt, call)
		time.Sleep(700 * time.Millisecond) // past the TTL and the lease
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		_, err = runtime.Do(ctx, rt, call)
		if !errors.Is(err, runtime.ErrOutcomeUnknown) || effects.Load() != 1 {
			t.Fatalf("after TTL and sweep: %v, effects %d; want ErrOutcomeUnknown, 1", err, effects.Load())
		}
	})
}
