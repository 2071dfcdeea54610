package runtime_test

// Adversarial review (h9): a store outage between the effect and its
// recording.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// downAfterClaim is a store whose transitions fail (the store went down
// after the claim).
type downAfterClaim struct {
	runtime.Store
	down atomic.Bool
}

var errStoreDown = errors.New("store: connection refused")

func (s *downAfterClaim) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.down.Load() {
		return 0, errStoreDown
	}
	return s.Store.Transition(ctx, p)
}

// Promise: "no client told failure for a success"; the completion
// "retr[ies] transient store errors" on its own timeout. Schedule: the
// effect succeeds, the store is down for the whole completion. What does
// the caller get? It must not be a *FailedError / ErrPermanent, and the
// response must be returned with whatever error, since the effect
// happened. With a query, the takeover after the lease must not run the
// effect again.
func TestReviewDoStoreDownAtCompletion(t *testing.T) {
	store := &downAfterClaim{Store: memstore.New()}
	rt, err := runtime.New(store, runtime.WithLease(300*time.Millisecond), runtime.WithCompletionTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	var effects atomic.Int32
	call := runtime.Call[reviewReq, string]{Operation: "Review.Down", Key: "k1", Request: reviewReq{1},
		Effect: func(ctx context.Context, r reviewReq) (string, error) {
			effects.Add(1)
			store.down.Store(true)
			return "charged", nil
		},
		Query: func(ctx context.Context, r reviewReq) (string, runtime.Outcome, error) {
			if effects.Load() > 0 {
				return "charged", runtime.OutcomeSucceeded, nil
			}
			return "", runtime.OutcomeNotHappened, nil
		}}
	got, err := runtime.Do(ctx, rt, call)
	t.Logf("first call: %q, %v", got, err)
	if errors.Is(err, runtime.ErrPermanent) || errors.Is(err, runtime.ErrOutcomeUnknown) && got == "" {
		t.Fatalf("the effect succeeded; its caller was told %v", err)
	}
	if !errors.Is(err, runtime.ErrNotRecorded) || got != "charged" {
		t.Fatalf("first call: %q, %v; want the response with ErrNotRecorded", got, err)
	}
	store.down.Store(false)
	time.Sleep(400 * time.Millisecond)
	got2, err := runtime.Do(ctx, rt, call)
	if err != nil || got2 != "charged" || effects.Load() != 1 {
		t.Fatalf("retry after the outage: %q, %v; effects %d; want the response, once", got2, err, effects.Load())
	}
}
