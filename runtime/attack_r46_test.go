// Review r46: outcomes and sentinels through runtime.Do.

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// A timeout the effect marked Permanent (the gateway timed out; the code
// that called it wraps everything it returns in Permanent) is UNKNOWN,
// never FAILED. The first caller must not be told a permanent failure
// (errors.Is(err, ErrPermanent)): the query then finds the charge done and
// the record converges to SUCCESS.
func TestR46PermanentTimeoutFirstCallerNotToldPermanent(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	charged := false
	call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k1", Request: "r",
		Effect: func(ctx context.Context, req string) (string, error) {
			charged = true // the gateway charged, then its reply timed out
			return "", runtime.Permanent(fmt.Errorf("gateway: %w", context.DeadlineExceeded))
		},
		Query: func(ctx context.Context, req string) (string, runtime.Outcome, error) {
			if charged {
				return "ch_1", runtime.OutcomeSucceeded, nil
			}
			return "", runtime.OutcomeNotHappened, nil
		},
	}
	_, first := runtime.Do(context.Background(), rt, call)
	resp, dupErr := runtime.Do(context.Background(), rt, call)
	t.Logf("first: %v; duplicate: %q, %v", first, resp, dupErr)
	if dupErr != nil || resp != "ch_1" {
		t.Fatalf("duplicate: %q %v (expected the converged success)", resp, dupErr)
	}
	var fe *runtime.FailedError
	if errors.Is(first, runtime.ErrPermanent) || errors.As(first, &fe) {
		t.Errorf("the first caller was told a permanent failure (errors.Is(err, ErrPermanent) = true) for a call that succeeded: %v", first)
	}
}

// The same through Retryable(Permanent(x)): the first mark decides, so the
// key is released and a retry runs the effect (and may succeed); the first
// caller must not be told ErrPermanent.
func TestR46RetryableOfPermanentNotToldPermanent(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k2", Request: "r",
		Effect: func(ctx context.Context, req string) (string, error) {
			runs++
			if runs == 1 {
				return "", runtime.Retryable(runtime.Permanent(errors.New("declined")))
			}
			return "ok", nil
		},
	}
	_, first := runtime.Do(context.Background(), rt, call)
	resp, second := runtime.Do(context.Background(), rt, call)
	t.Logf("first: %v; second: %q %v; runs %d", first, resp, second, runs)
	if second != nil || runs != 2 {
		t.Fatalf("second: %v runs %d", second, runs)
	}
	if errors.Is(first, runtime.ErrPermanent) {
		t.Errorf("the first caller was told a permanent failure for a key whose effect then happened: %v", first)
	}
}

// ErrKeyReused: "the key was used with another request payload (also while
// in flight)". A call with another payload is told so whatever state the
// first call's record is in: in flight, UNKNOWN, or PROCESSING whose lease
// ran out (a dead worker: the key stays bound to the first request).
func TestR46KeyReusedInEveryState(t *testing.T) {
	for _, s := range teststores.All() {
		t.Run(s.Name, func(t *testing.T) {
			const lease = 600 * time.Millisecond
			rt, err := runtime.New(s.New(t), runtime.WithLease(lease), runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), teststores.Unique())
			mk := func(key, req string, eff func(context.Context, string) (string, error)) runtime.Call[string, string] {
				return runtime.Call[string, string]{Operation: "Pay.Charge", Key: key, Request: req, Effect: eff}
			}
			other := mk("", "other", func(context.Context, string) (string, error) {
				t.Error("the effect ran for another payload")
				return "", nil
			})
			check := func(state, key string) {
				c := other
				c.Key = key
				start := time.Now()
				_, err := runtime.Do(ctx, rt, c)
				if !errors.Is(err, runtime.ErrKeyReused) {
					t.Errorf("%s: another payload got %v, not ErrKeyReused", state, err)
				} else if d := time.Since(start); d > 2*time.Second {
					t.Errorf("%s: ErrKeyReused after %v (MaxWait is 3s)", state, d)
				}
			}
			// In flight.
			release := make(chan struct{})
			done := make(chan struct{})
			started := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = runtime.Do(ctx, rt, mk("inflight", "first", func(ctx context.Context, _ string) (string, error) {
					close(started)
					<-release
					return "ok", nil
				}))
			}()
			<-started
			check("in flight", "inflight")
			close(release)
			<-done
			// UNKNOWN.
			_, err = runtime.Do(ctx, rt, mk("unknown", "first", func(context.Context, string) (string, error) {
				return "", errors.New("connection reset")
			}))
			if !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("unknown: %v", err)
			}
			check("UNKNOWN", "unknown")
			// FAILED.
			_, _ = runtime.Do(ctx, rt, mk("failed", "first", func(context.Context, string) (string, error) {
				return "", runtime.Permanent(errors.New("declined"))
			}))
			check("FAILED", "failed")
		})
	}
}

// A permanent failure whose FAILED write fails, and a timeout marked
// permanent whose UNKNOWN write fails: neither caller is told a permanent
// failure (README, Errors: "a store error ... the effect's error is then
// quoted, not wrapped"); the retry after the lease runs the effect.
func TestR46OutcomeWriteFailsNotPermanent(t *testing.T) {
	for _, to := range []runtime.State{runtime.StateFailed, runtime.StateUnknown} {
		t.Run(string(to), func(t *testing.T) {
			down := &teststores.OutcomeDown{Store: memstore.New(), To: to}
			down.Down.Store(true)
			rt, err := runtime.New(down, runtime.WithLease(300*time.Millisecond), runtime.WithCompletionTimeout(200*time.Millisecond), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
				Effect: func(ctx context.Context, _ string) (string, error) {
					runs++
					if runs == 1 {
						if to == runtime.StateUnknown {
							return "", runtime.Permanent(fmt.Errorf("gw: %w", context.DeadlineExceeded))
						}
						return "", runtime.Permanent(errors.New("declined"))
					}
					return "ok", nil
				}}
			_, first := runtime.Do(context.Background(), rt, call)
			down.Down.Store(false)
			time.Sleep(600 * time.Millisecond)
			resp, second := runtime.Do(context.Background(), rt, call)
			t.Logf("first %v; second %q %v; runs %d", first, resp, second, runs)
			if errors.Is(first, runtime.ErrPermanent) {
				t.Errorf("first caller told a permanent failure: %v", first)
			}
		})
	}
}

// README, Reconciliation: "Inline queries by duplicates do not count as
// attempts, so the reconciler always gets its ReconcileMaxAttempts (and an
// effect run again after a query found it did not happen starts from
// none)". Schedule: UNKNOWN; a reconciler pass (query: cannot tell) uses
// an attempt; a duplicate's inline query finds it did not happen and runs
// the effect again, which times out: UNKNOWN again, with no attempt used.
func TestR46AttemptsStartFromNoneAfterRerun(t *testing.T) {
	for _, s := range teststores.All() {
		t.Run(s.Name, func(t *testing.T) {
			store := s.New(t)
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), teststores.Unique())
			phase := 0 // 0: reconciler cannot tell; 1: did not happen
			q := func(ctx context.Context, _ string) (string, runtime.Outcome, error) {
				if phase == 0 {
					return "", runtime.OutcomeUnknown, nil
				}
				return "", runtime.OutcomeNotHappened, nil
			}
			if err := runtime.Register(rt, "Pay.Charge", q, runtime.QueryOptions{}); err != nil {
				t.Fatal(err)
			}
			call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r", Query: q,
				Effect: func(ctx context.Context, _ string) (string, error) {
					return "", fmt.Errorf("gw: %w", context.DeadlineExceeded)
				}}
			if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatal(err)
			}
			rc, err := runtime.NewReconciler(rt, runtime.ReconcileBackoff(time.Millisecond, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rc.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "Pay.Charge", Key: "k"}
			r1, err := store.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			phase = 1
			time.Sleep(20 * time.Millisecond)
			if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatal(err)
			}
			r2, err := store.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after the reconciler: %s attempts %d; after the rerun: %s attempts %d", r1.State, r1.Attempts, r2.State, r2.Attempts)
			if r1.Attempts != 1 || r2.Attempts != 0 {
				t.Errorf("attempts %d then %d; want 1 then 0 (the rerun starts from none)", r1.Attempts, r2.Attempts)
			}
		})
	}
}

// The duplicate's side of F1: an UNKNOWN record whose query cannot tell
// and errs with an error that matches ErrPermanent (its lookup went
// through another idem call that failed for good: a *FailedError). The
// record stays UNKNOWN; the duplicate must not be told a permanent
// failure. Later the query finds the effect done.
func TestR46QueryErrorPermanentNotToldPermanent(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	lookupDown := true
	call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
		Effect: func(ctx context.Context, _ string) (string, error) {
			return "", fmt.Errorf("gw: %w", context.DeadlineExceeded)
		},
		Query: func(ctx context.Context, _ string) (string, runtime.Outcome, error) {
			if lookupDown {
				return "", runtime.OutcomeUnknown, fmt.Errorf("lookup: %w", &runtime.FailedError{Message: "ledger refused the lookup"})
			}
			return "ch_1", runtime.OutcomeSucceeded, nil
		}}
	_, _ = runtime.Do(context.Background(), rt, call)
	_, dup := runtime.Do(context.Background(), rt, call)
	lookupDown = false
	resp, later := runtime.Do(context.Background(), rt, call)
	t.Logf("duplicate: %v; later: %q %v", dup, resp, later)
	if later != nil || resp != "ch_1" {
		t.Fatalf("later: %q %v", resp, later)
	}
	if errors.Is(dup, runtime.ErrPermanent) {
		t.Errorf("the duplicate was told a permanent failure (errors.Is(err, ErrPermanent)) for a call that succeeded: %v", dup)
	}
}
