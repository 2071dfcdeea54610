package storetest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// sizeLimit is the record limit of the size-rule cases: small enough that a
// gateway's HTML error page, a failure's detail payload and a large response
// are all refused.
const sizeLimit = 1 << 10

// htmlPage is a gateway's error page: JSON with HTML escaping would turn
// each <, > and & into six bytes.
var htmlPage = strings.Repeat("<html><body><h1>502 Bad Gateway</h1>&nbsp;</body></html>", 80)

// detailed is a permanent error with a large machine-readable payload.
type detailed struct{}

func (detailed) Error() string         { return "card declined by the issuer" }
func (detailed) ErrorCode() string     { return "card_declined" }
func (detailed) FailureDetail() []byte { return []byte(strings.Repeat("d", 8<<10)) }

// testEveryOutcomeOverLimit: whatever its kind and size, an outcome is
// recorded (shortened if need be), so a record never stays PROCESSING for a
// takeover to run the effect again, nor UNKNOWN for want of room.
func testEveryOutcomeOverLimit(t *testing.T, s runtime.Store) {
	big := strings.Repeat("x", 8<<10)
	limited := tooLarge{Store: s, limit: sizeLimit}
	// An operation of its own: the reconcilers below answer for every
	// record of their operation they acquire, and another case running
	// beside this one on the same store leaves expired PROCESSING records
	// of Payments.Charge (a reconciler here once recorded its HTML failure
	// on a fault case's record, whose duplicate then replayed it).
	op := "Payments.ChargeOverLimit." + uniqueScope(t)[len(uniqueScope(t))-12:]
	type check func(t *testing.T, rec runtime.Record, dupErr error)
	failedWith := func(code string) check {
		return func(t *testing.T, rec runtime.Record, dupErr error) {
			var fe *runtime.FailedError
			if rec.State != runtime.StateFailed || !errors.As(dupErr, &fe) {
				t.Fatalf("record %s, duplicate got %v; want FAILED replayed as a *FailedError", rec.State, dupErr)
			}
			if fe.Code != code {
				t.Errorf("replayed code %q, want %q", fe.Code, code)
			}
			if rec.Note == "" {
				t.Errorf("the record's note does not say what was left out")
			}
		}
	}
	succeeded := func(t *testing.T, rec runtime.Record, dupErr error) {
		if rec.State != runtime.StateSuccess || !rec.ResponseOmitted || !errors.Is(dupErr, runtime.ErrNotReplayable) {
			t.Fatalf("record %s (omitted %v), duplicate got %v; want SUCCESS without its response", rec.State, rec.ResponseOmitted, dupErr)
		}
	}
	tests := []struct {
		name string
		// outcome records the outcome of key k, through s, and reports how
		// many times the effect ran.
		outcome func(t *testing.T, ctx context.Context, runs *atomic.Int32)
		check   check
	}{
		{"permanent failure with an HTML message", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			rt := newRuntime(t, limited, runtime.WithLease(shortLease))
			_, err := doStarted(ctx, rt, opCall(op, "k", chargeReq{"a", 1}, func(context.Context, chargeReq) (receipt, error) {
				runs.Add(1)
				return receipt{}, runtime.Permanent(errors.New("gateway answered: " + htmlPage))
			}))
			if !errors.Is(err, runtime.ErrPermanent) {
				t.Fatalf("first call: %v, want the permanent error", err)
			}
		}, failedWith("")},
		{"permanent failure with a large detail", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			rt := newRuntime(t, limited, runtime.WithLease(shortLease))
			_, err := doStarted(ctx, rt, opCall(op, "k", chargeReq{"a", 1}, func(context.Context, chargeReq) (receipt, error) {
				runs.Add(1)
				return receipt{}, runtime.Permanent(detailed{})
			}))
			if !errors.Is(err, runtime.ErrPermanent) {
				t.Fatalf("first call: %v, want the permanent error", err)
			}
		}, failedWith("card_declined")},
		{"failure under RecordFailed", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			rt := newRuntime(t, limited, runtime.WithLease(shortLease), runtime.WithErrorPolicy(runtime.RecordFailed))
			_, _ = runtime.Do(ctx, rt, opCall(op, "k", chargeReq{"a", 1}, func(context.Context, chargeReq) (receipt, error) {
				runs.Add(1)
				return receipt{}, errors.New(htmlPage)
			}))
		}, failedWith("")},
		{"reconciler: the query says failed, at length", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			converge(t, ctx, op, limited, runs, func(context.Context, chargeReq) (receipt, runtime.Outcome, error) {
				return receipt{}, runtime.OutcomeFailed, errors.New(htmlPage)
			})
		}, failedWith("")},
		{"reconciler: the query found a large response", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			converge(t, ctx, op, limited, runs, func(context.Context, chargeReq) (receipt, runtime.Outcome, error) {
				return receipt{ID: big}, runtime.OutcomeSucceeded, nil
			})
		}, succeeded},
		{"reconciler: the query cannot tell, at length", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			// Not final: the check below is for UNKNOWN with its note cut.
			converge(t, ctx, op, noteLimited{tooLarge: limited}, runs, func(context.Context, chargeReq) (receipt, runtime.Outcome, error) {
				return receipt{}, runtime.OutcomeUnknown, errors.New(htmlPage)
			})
		}, func(t *testing.T, rec runtime.Record, dupErr error) {
			if rec.State != runtime.StateUnknown || rec.Attempts < 1 || len(rec.Note) > sizeLimit {
				t.Fatalf("record %s after %d attempts, note %d bytes: the reconciler's write was refused", rec.State, rec.Attempts, len(rec.Note))
			}
		}},
		{"resolved by hand as failed, at length", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			resolve(t, ctx, op, limited, runs, runtime.Resolution{To: runtime.ResolveFailed, Failure: errors.New(htmlPage), Reason: "seen in the dashboard"})
		}, failedWith("")},
		{"resolved by hand as succeeded, with a large response", func(t *testing.T, ctx context.Context, runs *atomic.Int32) {
			resolve(t, ctx, op, limited, runs, runtime.Resolution{To: runtime.ResolveSuccess, Response: []byte(`{"id":"` + big + `"}`), Reason: "seen in the dashboard"})
		}, succeeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := scoped(t)
			var runs atomic.Int32
			tc.outcome(t, ctx, &runs)
			time.Sleep(2 * shortLease) // a PROCESSING record would be taken over now
			rt := newRuntime(t, limited, runtime.WithLease(shortLease), runtime.WithMaxWait(0))
			_, dupErr := runtime.Do(ctx, rt, opCall(op, "k", chargeReq{"a", 1}, func(context.Context, chargeReq) (receipt, error) {
				runs.Add(1)
				return receipt{ID: "again"}, nil
			}))
			if n := runs.Load(); n > 1 {
				t.Fatalf("the effect ran %d times, want at most once (duplicate got %v)", n, dupErr)
			}
			rec, err := s.Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: op, Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rec, dupErr)
		})
	}
}

// noteLimited also refuses notes over the limit.
type noteLimited struct{ tooLarge }

func (s noteLimited) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Note) > s.limit {
		return 0, runtime.ErrTooLarge
	}
	return s.tooLarge.Transition(ctx, p)
}

// leaveUnknown runs key k with an effect that times out, so its record is
// UNKNOWN, and returns the runtime it used.
func leaveUnknown(t *testing.T, ctx context.Context, op string, s runtime.Store, runs *atomic.Int32) *runtime.Runtime {
	t.Helper()
	rt := newRuntime(t, s, runtime.WithLease(shortLease))
	_, err := doStarted(ctx, rt, opCall(op, "k", chargeReq{"a", 1}, func(ctx context.Context, _ chargeReq) (receipt, error) {
		runs.Add(1)
		return receipt{}, context.DeadlineExceeded
	}))
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
	}
	return rt
}

// converge leaves key k UNKNOWN (its effect timed out) and runs a reconciler
// whose query is q, once.
func converge(t *testing.T, ctx context.Context, op string, s runtime.Store, runs *atomic.Int32, q runtime.QueryFunc[chargeReq, receipt]) {
	t.Helper()
	rt := leaveUnknown(t, ctx, op, s, runs)
	if err := runtime.Register(rt, op, q, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r := newReconciler(t, rt, runtime.ReconcileMaxAttempts(1))
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatalf("reconciler: %v", err)
	}
}

// resolve leaves key k UNKNOWN and resolves it by hand as res says.
func resolve(t *testing.T, ctx context.Context, op string, s runtime.Store, runs *atomic.Int32, res runtime.Resolution) {
	t.Helper()
	leaveUnknown(t, ctx, op, s, runs)
	res.ID = runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: op, Key: "k"}
	res.Owner = "operator"
	if _, err := runtime.Resolve(ctx, s, res); err != nil {
		t.Fatalf("resolve: %v", err)
	}
}

// opCall is call for operation op.
func opCall(op, key string, req chargeReq, effect func(context.Context, chargeReq) (receipt, error)) runtime.Call[chargeReq, receipt] {
	c := call(key, req, effect)
	c.Operation = op
	return c
}

// lateStartText is what the runtime says when a claim's reply came so late
// that it confirms the lease with a renewal before the effect starts, and
// that renewal failed: the effect did not run.
const lateStartText = "the lease may have expired before the effect could start"

// doStarted is runtime.Do, called again (at most five times) while the
// call's late start could not be confirmed: on a loaded machine (a cold CI
// run) the claim's reply and the confirming renewal can take longer than
// the short leases these cases use, and the runtime then refuses to start
// the effect, as documented; a client retries such an answer.
func doStarted[Req, Resp any](ctx context.Context, rt *runtime.Runtime, c runtime.Call[Req, Resp]) (Resp, error) {
	resp, err := runtime.Do(ctx, rt, c)
	for try := 1; try < 5 && err != nil && strings.Contains(err.Error(), lateStartText); try++ {
		resp, err = runtime.Do(ctx, rt, c)
	}
	return resp, err
}
