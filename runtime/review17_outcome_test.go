package runtime_test

// Adversarial review of issue 17: the completion now writes with a lazy
// context (the caller's values, not its cancellation, and a deadline), and
// the success path encodes the response once. These attacks check the
// outcome a caller is told against the record, on every store.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Promise: an effect that succeeds is recorded SUCCESS and replayed even
// when the caller's context ended while it ran (the completion context
// does not inherit the cancellation); the caller is told success. Schedule:
// the caller cancels (and, in another case, its deadline passes) while the
// effect runs; the effect sees its context end, and its charge goes through
// all the same.
func TestReview17CompletionAfterCallerGone(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		base := reviewCtx()
		for _, mode := range []string{"cancel", "deadline"} {
			var ctx context.Context
			var cancel context.CancelFunc
			if mode == "cancel" {
				ctx, cancel = context.WithCancel(base)
			} else {
				ctx, cancel = context.WithTimeout(base, 500*time.Millisecond)
			}
			var runs atomic.Int32
			call := runtime.Call[reviewReq, string]{Operation: "R17.Gone", Key: mode, Request: reviewReq{1},
				Effect: func(ectx context.Context, _ reviewReq) (string, error) {
					runs.Add(1)
					if mode == "cancel" {
						cancel()
					}
					<-ectx.Done()                     // the caller is gone
					time.Sleep(30 * time.Millisecond) // the charge goes through regardless
					return "charged", nil
				}}
			got, err := runtime.Do(ctx, rt, call)
			cancel()
			if err != nil || got != "charged" {
				t.Errorf("%s: first call told %q, %v; the effect succeeded", mode, got, err)
			}
			again, err := runtime.Do(base, rt, call)
			if err != nil || again != "charged" || runs.Load() != 1 {
				t.Errorf("%s: duplicate got %q, %v, effect ran %d times; want the success replayed, once", mode, again, err, runs.Load())
			}
		}
	})
}

// Promise (the size rule): a request over the store's limit is refused
// before anything runs; a response over it is recorded as a success
// without a response (the caller gets its response, duplicates
// ErrNotReplayable, the effect never runs again); a permanent failure with
// a huge message is recorded FAILED, shortened, and replayed as a failure.
func TestReview17Oversized(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		big := strings.Repeat("x", 2<<20)
		var runs atomic.Int32
		type bigReq struct{ Blob string }

		_, err = runtime.Do(ctx, rt, runtime.Call[bigReq, string]{Operation: "R17.Big", Key: "req", Request: bigReq{big},
			Effect: func(context.Context, bigReq) (string, error) { runs.Add(1); return "ok", nil }})
		memory := err == nil
		if !memory && (!errors.Is(err, runtime.ErrTooLarge) || runs.Load() != 0) {
			t.Errorf("oversized request: %v, effect ran %d times; want ErrTooLarge before the effect", err, runs.Load())
		}

		runs.Store(0)
		resp := runtime.Call[reviewReq, string]{Operation: "R17.Big", Key: "resp", Request: reviewReq{1},
			Effect: func(context.Context, reviewReq) (string, error) { runs.Add(1); return big, nil }}
		got, err := runtime.Do(ctx, rt, resp)
		if err != nil || len(got) != len(big) {
			t.Fatalf("oversized response: first caller got %d bytes, %v; want its response", len(got), err)
		}
		for range 2 {
			got, err = runtime.Do(ctx, rt, resp)
			if memory {
				if err != nil || len(got) != len(big) {
					t.Errorf("memory store: replay %d bytes, %v", len(got), err)
				}
			} else if !errors.Is(err, runtime.ErrNotReplayable) {
				t.Errorf("oversized response: duplicate got %d bytes, %v; want ErrNotReplayable", len(got), err)
			}
		}
		if runs.Load() != 1 {
			t.Errorf("oversized response: effect ran %d times", runs.Load())
		}

		runs.Store(0)
		fail := runtime.Call[reviewReq, string]{Operation: "R17.Big", Key: "fail", Request: reviewReq{1},
			Effect: func(context.Context, reviewReq) (string, error) {
				runs.Add(1)
				return "", runtime.Permanent(errors.New("declined: " + big))
			}}
		for i := range 3 {
			_, err := runtime.Do(ctx, rt, fail)
			var fe *runtime.FailedError
			if i > 0 && !errors.As(err, &fe) {
				t.Errorf("huge failure, duplicate %d: %v; want a *FailedError replayed", i, err)
			}
			if i == 0 && !errors.Is(err, runtime.ErrPermanent) {
				t.Errorf("huge failure, first call: %v", err)
			}
		}
		if runs.Load() != 1 {
			t.Errorf("huge failure: effect ran %d times", runs.Load())
		}
	})
}
