package runtime_test

// Adversarial review (h9): duplicates of an UNKNOWN record that carry a
// query.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/runtime"
)

// Promise: a call whose claim found another fingerprint gets
// ErrKeyReused, even when the record is UNKNOWN and the call has a query;
// the query is never asked about another payload, and the other payload's
// effect never runs. And a duplicate whose query errs is told
// ErrOutcomeUnknown (the record "stays UNKNOWN"), not a store outage.
func TestReviewUnknownRecordDuplicates(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects, queriesB atomic.Int32
		base := runtime.Call[reviewReq, string]{Operation: "Review.Unknown", Key: "k1", Request: reviewReq{100},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				effects.Add(1)
				return "", context.DeadlineExceeded // applied, answer lost
			}}
		if _, err := runtime.Do(ctx, rt, base); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatalf("first call: %v", err)
		}

		other := base
		other.Request = reviewReq{999}
		other.Effect = func(ctx context.Context, r reviewReq) (string, error) { effects.Add(1); return "other", nil }
		other.Query = func(ctx context.Context, r reviewReq) (string, runtime.Outcome, error) {
			queriesB.Add(1)
			return "", runtime.OutcomeNotHappened, nil
		}
		_, err = runtime.Do(ctx, rt, other)
		if !errors.Is(err, runtime.ErrKeyReused) || effects.Load() != 1 || queriesB.Load() != 0 {
			t.Fatalf("another payload on an UNKNOWN record: %v (effects %d, queries with the other payload %d); want ErrKeyReused, 1, 0", err, effects.Load(), queriesB.Load())
		}

		failing := base
		failing.Query = func(ctx context.Context, r reviewReq) (string, runtime.Outcome, error) {
			return "", runtime.OutcomeUnknown, errors.New("gateway: 500")
		}
		_, err = runtime.Do(ctx, rt, failing)
		if !errors.Is(err, runtime.ErrOutcomeUnknown) || effects.Load() != 1 {
			t.Fatalf("duplicate whose query errs: %v (effects %d); want ErrOutcomeUnknown", err, effects.Load())
		}
	})
}
