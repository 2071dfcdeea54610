package runtime_test

// Adversarial review (h9): attacks on runtime.Do's promises, on every
// store (PostgreSQL and Redis skip without their servers).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

type reviewReq struct {
	Cents int `json:"cents"`
}

func reviewEach(t *testing.T, f func(t *testing.T, store runtime.Store)) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) { f(t, st.New(t)) })
	}
}

func reviewCtx() context.Context {
	return runtime.WithScope(context.Background(), "review-"+teststores.Unique())
}

// Promise: a panic is UNKNOWN ("timeout / cancel / panic / unknown error
// ---> UNKNOWN"), never run again without a query, and a duplicate is told
// ErrOutcomeUnknown, not ErrInProgress forever. Schedule: the effect
// applies and panics (WithRecoverPanics off); an outer recover (as
// net/http's) swallows it; duplicates at once and after two leases.
func TestReviewDoPanicIsUnknown(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithLease(400*time.Millisecond), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects atomic.Int32
		call := runtime.Call[reviewReq, string]{Operation: "Review.Panic", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				effects.Add(1)
				panic("boom after the charge")
			}}
		func() {
			defer func() { _ = recover() }()
			_, _ = runtime.Do(ctx, rt, call)
		}()
		for _, wait := range []time.Duration{0, 800 * time.Millisecond} {
			time.Sleep(wait)
			_, err := runtime.Do(ctx, rt, call)
			if !errors.Is(err, runtime.ErrOutcomeUnknown) || effects.Load() != 1 {
				t.Fatalf("after %v: duplicate got %v, effect ran %d times; want ErrOutcomeUnknown, once", wait, err, effects.Load())
			}
		}
	})
}

// Promise: ErrKeyReused "the key was used with another request payload
// (also while in flight)". Schedule: the first call is in its effect; a
// call with the same key and another payload must be told at once, not
// after MaxWait and not ErrInProgress.
func TestReviewDoKeyReusedInFlight(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithMaxWait(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Review.Reuse", Key: "k1", Request: reviewReq{100},
				Effect: func(ctx context.Context, r reviewReq) (string, error) {
					close(started)
					<-release
					return "ok", nil
				}})
			done <- err
		}()
		<-started
		t0 := time.Now()
		_, err = runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Review.Reuse", Key: "k1", Request: reviewReq{999},
			Effect: func(ctx context.Context, r reviewReq) (string, error) { return "", errors.New("must not run") }})
		took := time.Since(t0)
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("first call: %v", err)
		}
		if !errors.Is(err, runtime.ErrKeyReused) || took > 750*time.Millisecond {
			t.Fatalf("key reused in flight: got %v after %v; want ErrKeyReused at once", err, took)
		}
	})
}

// Promise: a duplicate whose own deadline passes while it waits is told
// so (the adapters' 504 "timeout" / DeadlineExceeded), never "in
// progress", "unknown" or a store outage, and never runs the effect.
func TestReviewDoDuplicateDeadlineWhileWaiting(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		started, release := make(chan struct{}), make(chan struct{})
		var effects atomic.Int32
		call := runtime.Call[reviewReq, string]{Operation: "Review.Deadline", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				if effects.Add(1) == 1 {
					close(started)
					<-release
				}
				return "ok", nil
			}}
		done := make(chan error, 1)
		go func() { _, err := runtime.Do(ctx, rt, call); done <- err }()
		<-started
		dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		_, err = runtime.Do(dctx, rt, call)
		cancel()
		close(release)
		<-done
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrInProgress) || errors.Is(err, runtime.ErrOutcomeUnknown) || effects.Load() != 1 {
			t.Fatalf("duplicate with a 150ms deadline got %v (effects %d); want its deadline only", err, effects.Load())
		}
	})
}

// Promise: ErrNotReplayable "the call succeeded but its response was not
// stored (too large for the store, not encodable); stable for the TTL,
// never a re-run", and no client is told failure for a success.
// Schedule: the effect succeeds with a response JSON cannot encode (NaN).
func TestReviewDoUnencodableResponse(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects atomic.Int32
		call := runtime.Call[reviewReq, float64]{Operation: "Review.NaN", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (float64, error) {
				effects.Add(1)
				return math.NaN(), nil
			}}
		_, err1 := runtime.Do(ctx, rt, call)
		_, err2 := runtime.Do(ctx, rt, call)
		if err1 != nil || !errors.Is(err2, runtime.ErrNotReplayable) || effects.Load() != 1 {
			t.Fatalf("first: %v; duplicate: %v; effect ran %d times; want success, ErrNotReplayable, once", err1, err2, effects.Load())
		}
	})
}

// Promise (the lease rule): a worker whose store answers keeps its lease
// however long the effect runs; a duplicate meanwhile never runs the
// effect. Schedule: lease 300ms, effect 1.2s, duplicates every 200ms.
func TestReviewDoLongEffectKeepsLease(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		// A renewal the store answers late (a starved server) counts as a
		// stall of the process: it loses the lease the same way.
		starved := stall.Start()
		rt, err := runtime.New(stall.TimedRenew{Store: store, W: starved}, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var effects atomic.Int32
		started := make(chan struct{}, 1)
		call := runtime.Call[reviewReq, string]{Operation: "Review.Long", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				effects.Add(1)
				select {
				case started <- struct{}{}:
				default: // a second run: counted above
				}
				select {
				case <-time.After(1200 * time.Millisecond):
					return "ok", nil
				case <-ctx.Done():
					return "", fmt.Errorf("stopped: %w", context.Cause(ctx))
				}
			}}
		done := make(chan error, 1)
		go func() { _, err := runtime.Do(ctx, rt, call); done <- err }()
		// The duplicates start once the first call runs its effect: a
		// first call whose claim came after the first duplicate's (its
		// goroutine started 200 ms late, under load) was that duplicate.
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("first call, before its effect: %v", err)
		}
		var dupErrs []error
		for i := 0; i < 5; i++ {
			time.Sleep(200 * time.Millisecond)
			if _, err := runtime.Do(ctx, rt, call); err != nil && !errors.Is(err, runtime.ErrInProgress) {
				dupErrs = append(dupErrs, fmt.Errorf("duplicate %d: %w", i, err))
			}
		}
		err = <-done
		// Whatever happened, the effect runs once.
		if n := effects.Load(); n != 1 {
			t.Fatalf("effect ran %d times", n)
		}
		// A lease of 300 ms is kept by renewals every 100 ms: a process that
		// did not run for a third of the lease (a machine with every core
		// busy) loses it to the machine, and the lease rule then stops the
		// effect (the duplicates are told the outcome is unknown). Only a
		// process that ran on time must keep it.
		if worst := starved.Stop(); errors.Is(err, runtime.ErrLeaseLost) && worst >= 100*time.Millisecond {
			t.Logf("the lease was lost while the process stalled for up to %v (the machine's load): not counted: %v", worst, err)
			return
		}
		for _, e := range dupErrs {
			t.Error(e)
		}
		if err != nil {
			t.Fatalf("first call: %v", err)
		}
	})
}

// getHook is a store whose Get calls hook after each read.
type getHook struct {
	runtime.Store
	hook func()
}

func (s getHook) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	s.hook()
	return rec, err
}

// Promise: a duplicate waits on a call in flight and, when that call fails
// with a retryable error (its claim released, the record gone), claims the
// key and runs the effect itself, rather than being told the record was not
// found. Schedule: the first call's effect blocks until the duplicate has
// read the record PROCESSING (its first Get while waiting), then fails.
func TestReviewDoWaiterClaimsAfterRelease(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		waiting := make(chan struct{})
		var once sync.Once
		rt, err := runtime.New(getHook{store, func() { once.Do(func() { close(waiting) }) }},
			runtime.WithLease(5*time.Second), runtime.WithMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		started := make(chan struct{})
		var effects atomic.Int32
		call := runtime.Call[reviewReq, string]{Operation: "Review.Released", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, r reviewReq) (string, error) {
				if effects.Add(1) == 1 {
					close(started)
					<-waiting
					return "", runtime.Retryable(errors.New("the request never left the process")) // released
				}
				return "second", nil
			}}
		first := make(chan error, 1)
		go func() { _, err := runtime.Do(ctx, rt, call); first <- err }()
		<-started
		resp, err := runtime.Do(ctx, rt, call)
		if err != nil || resp != "second" {
			t.Fatalf("duplicate got %q, %v; want it to claim the released key and run the effect", resp, err)
		}
		if err := <-first; err == nil {
			t.Fatal("first call succeeded; want its effect's error")
		}
		if n := effects.Load(); n != 2 {
			t.Fatalf("effect ran %d times, want 2", n)
		}
	})
}
