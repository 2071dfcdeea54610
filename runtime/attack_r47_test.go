// Review r47: sentinels versus what was recorded, through runtime.Do.

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// README, state machine: "A timeout anywhere in the error tree
// (context.DeadlineExceeded, a net.Error or *url.Error that timed out, gRPC
// DeadlineExceeded) ... are UNKNOWN under every error policy and whatever
// Permanent or Retryable says: never FAILED". runtime/unmarked.go:
// "Everything else in err's tree still matches (the timeout, ...)".
//
// Schedule: an inner runtime.Do's effect gets a downstream timeout (a
// net.Error whose Timeout() is true, or a gRPC DeadlineExceeded status)
// and its code marks it Permanent: the inner record is UNKNOWN, correctly.
// The outer effect returns that error marked Permanent (the code around it
// marks everything it returns): a timeout is in its tree, so the outer
// record must be UNKNOWN. It is recorded FAILED, and a duplicate of the
// outer call is told a permanent failure, while the inner call may still
// converge to SUCCESS.
func TestR47NestedUnknownTimeoutRecordedFailed(t *testing.T) {
	timeouts := map[string]error{
		"net.Error": &net.DNSError{Err: "i/o timeout", Name: "gateway.internal", IsTimeout: true},
		"grpc":      status.Error(codes.DeadlineExceeded, "gateway: deadline exceeded"),
	}
	for name, timeout := range timeouts {
		t.Run(name, func(t *testing.T) {
			if !runtime.IsTimeout(timeout) {
				t.Fatalf("precondition: IsTimeout(%v) false", timeout)
			}
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			inner := runtime.Call[string, string]{Operation: "Gateway.Charge", Key: "g1", Request: "r",
				Effect: func(context.Context, string) (string, error) {
					return "", runtime.Permanent(fmt.Errorf("gateway: %w", timeout))
				}}
			outerRuns := 0
			outer := runtime.Call[string, string]{Operation: "Orders.Pay", Key: "o1", Request: "r",
				Effect: func(ctx context.Context, _ string) (string, error) {
					outerRuns++
					_, err := runtime.Do(ctx, rt, inner)
					if err != nil {
						return "", runtime.Permanent(fmt.Errorf("paying: %w", err))
					}
					return "paid", nil
				}}
			_, first := runtime.Do(ctx, rt, outer)
			_, innerErr := runtime.Do(ctx, rt, inner)
			t.Logf("inner duplicate: %v", innerErr)
			if !errors.Is(innerErr, runtime.ErrOutcomeUnknown) {
				t.Fatalf("precondition: the inner record is not UNKNOWN: %v", innerErr)
			}
			_, dup := runtime.Do(ctx, rt, outer)
			t.Logf("outer first: %v\nouter duplicate: %v (outer runs %d)", first, dup, outerRuns)
			// The reconciler then converges the inner record: the charge
			// happened. The outer record stays FAILED for good.
			if err := runtime.Register(rt, "Gateway.Charge", func(context.Context, string) (string, runtime.Outcome, error) {
				return "ch_1", runtime.OutcomeSucceeded, nil
			}, runtime.QueryOptions{}); err != nil {
				t.Fatal(err)
			}
			rec, err := runtime.NewReconciler(rt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			charge, innerAfter := runtime.Do(ctx, rt, inner)
			_, outerAfter := runtime.Do(ctx, rt, outer)
			t.Logf("after reconciling: inner %q %v; outer %v", charge, innerAfter, outerAfter)
			if errors.Is(first, runtime.ErrPermanent) || errors.Is(dup, runtime.ErrPermanent) {
				t.Errorf("a timeout in the tree (the nested call's UNKNOWN) was recorded FAILED: first caller ErrPermanent=%v, duplicate ErrPermanent=%v",
					errors.Is(first, runtime.ErrPermanent), errors.Is(dup, runtime.ErrPermanent))
			}
		})
	}
}

// runtime.Uncertain / runtime.IsTimeout on what Do returns for an UNKNOWN
// timeout that was marked Permanent: unmarked.go promises "Everything else
// in err's tree still matches (the timeout, ...)", and Uncertain's doc
// "a timeout anywhere in the error tree". The returned error says it is a
// net.Error that timed out (errors.As) but Uncertain says it is not.
func TestR47UnknownTimeoutNotUncertain(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	timeout := &net.DNSError{Err: "i/o timeout", Name: "gateway.internal", IsTimeout: true}
	_, got := runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "Gateway.Charge", Key: "g2", Request: "r",
		Effect: func(context.Context, string) (string, error) {
			return "", runtime.Permanent(fmt.Errorf("gateway: %w", timeout))
		}})
	var ne net.Error
	as := errors.As(got, &ne) && ne.Timeout()
	t.Logf("returned: %v; errors.As net.Error timed out: %v; Uncertain: %v; IsTimeout: %v; ErrOutcomeUnknown: %v",
		got, as, runtime.Uncertain(got), runtime.IsTimeout(got), errors.Is(got, runtime.ErrOutcomeUnknown))
	if as && (!runtime.Uncertain(got) || !runtime.IsTimeout(got)) {
		t.Errorf("the returned UNKNOWN error holds a net.Error that timed out, yet Uncertain=%v IsTimeout=%v", runtime.Uncertain(got), runtime.IsTimeout(got))
	}
}

// README, state machine: "Past that, the first Permanent or Retryable mark
// in the tree decides". Schedule: the inner call's effect returns
// Retryable(Permanent(x)) (the first mark, Retryable, decides: released,
// nothing happened). The outer effect returns that error as it is. Its
// tree holds the Retryable mark first, so the outer record must be
// released too (a retry runs it). The mark is hidden behind the runtime's
// unmarked wrapper (no Unwrap), so the error policy decides instead: FAILED
// under RecordFailed (every retry told a permanent failure), UNKNOWN by
// default (and without a query it stays UNKNOWN).
func TestR47NestedRetryableMarkIgnored(t *testing.T) {
	for _, pol := range []runtime.ErrorPolicy{runtime.RecordFailed, runtime.RecordUnknown} {
		t.Run(pol.String(), func(t *testing.T) {
			rt, err := runtime.New(memstore.New(), runtime.WithErrorPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			innerRuns := 0
			inner := runtime.Call[string, string]{Operation: "Gateway.Charge", Key: "g3", Request: "r",
				Effect: func(context.Context, string) (string, error) {
					innerRuns++
					if innerRuns == 1 {
						return "", runtime.Retryable(runtime.Permanent(errors.New("gateway refused the connection")))
					}
					return "ch_1", nil
				}}
			outer := runtime.Call[string, string]{Operation: "Orders.Pay", Key: "o3", Request: "r",
				Effect: func(ctx context.Context, _ string) (string, error) {
					return runtime.Do(ctx, rt, inner)
				}}
			_, first := runtime.Do(ctx, rt, outer)
			resp, second := runtime.Do(ctx, rt, outer)
			t.Logf("first: %v; second: %q %v; inner runs %d", first, resp, second, innerRuns)
			if second != nil || resp != "ch_1" {
				t.Errorf("the retry of a call whose error's first mark is Retryable: %q %v; want the effect run again", resp, second)
			}
		})
	}
}

type r47RenewDown struct {
	runtime.Store
	down atomic.Bool
}

func (s *r47RenewDown) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errors.New("renew: connection refused")
	}
	return s.Store.Renew(ctx, p)
}

// README, the lease rule (r47 read "the attempt is recorded as UNKNOWN by
// CAS"; the README now says what the code does): what the effect returns
// after the lease rule cancelled its context is recorded by CAS as always.
// Schedule: renewals fail; the effect's context is cancelled by the lease
// rule; the effect (ignoring its context) then returns
// Permanent("declined"), its own answer: FAILED, replayed to a duplicate.
// An effect that returns the context's error is UNKNOWN.
func TestR47LeaseRuleThenPermanent(t *testing.T) {
	st := &r47RenewDown{Store: memstore.New()}
	rt, err := runtime.New(st, runtime.WithLease(900*time.Millisecond), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	var cause error
	call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "lr1", Request: "r",
		Effect: func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return "", runtime.Permanent(errors.New("declined"))
		}}
	_, first := runtime.Do(context.Background(), rt, call)
	st.down.Store(false)
	rec, _ := st.Get(context.Background(), runtime.Identity{Operation: "Pay.Charge", Key: "lr1"})
	_, dup := runtime.Do(context.Background(), rt, call)
	t.Logf("cause %v; first %v (ErrPermanent %v); record %s; duplicate %v", cause, first, errors.Is(first, runtime.ErrPermanent), rec.State, dup)
	if rec.State != runtime.StateFailed || !errors.Is(dup, runtime.ErrPermanent) {
		t.Errorf("the effect answered a permanent failure after the lease rule stopped it: record %s, duplicate %v; want FAILED, replayed", rec.State, dup)
	}
	honours := call
	honours.Key = "lr2"
	honours.Effect = func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done()
		return "", runtime.Permanent(fmt.Errorf("charging: %w", ctx.Err()))
	}
	st.down.Store(true)
	_, first = runtime.Do(context.Background(), rt, honours)
	st.down.Store(false)
	rec, _ = st.Get(context.Background(), runtime.Identity{Operation: "Pay.Charge", Key: "lr2"})
	if rec.State != runtime.StateUnknown || errors.Is(first, runtime.ErrPermanent) {
		t.Errorf("an effect that returned its context's error (marked Permanent) after the lease rule: record %s, told %v; want UNKNOWN, not a permanent failure", rec.State, first)
	}
}

type r47BadUnwrap struct{ p *int }

func (e r47BadUnwrap) Error() string { return "bad unwrap" }
func (e r47BadUnwrap) Unwrap() error { _ = *e.p; return nil } // nil pointer: panics

type r47PermBadUnwrap struct{ p *int }

func (e r47PermBadUnwrap) Error() string        { return "perm, bad unwrap" }
func (e r47PermBadUnwrap) Is(target error) bool { return target == runtime.ErrPermanent }
func (e r47PermBadUnwrap) Unwrap() error        { _ = *e.p; return nil }

// README, Observability: "an error whose Error method panics is recorded
// with a note saying so (also when its Unwrap or Is panics: the error is
// then not taken for a permanent one)". Observe the record for errors
// whose Unwrap panics, beside a Permanent mark or matching ErrPermanent.
func TestR47PanickingUnwrapPermanence(t *testing.T) {
	cases := map[string]error{
		"join mark first":     errors.Join(runtime.Permanent(errors.New("declined")), r47BadUnwrap{}),
		"join bad first":      errors.Join(r47BadUnwrap{}, runtime.Permanent(errors.New("declined"))),
		"permanent of bad":    runtime.Permanent(r47BadUnwrap{}),
		"is-permanent, bad":   r47PermBadUnwrap{},
		"wrapped is-perm bad": fmt.Errorf("x: %w", r47PermBadUnwrap{}),
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			st := memstore.New()
			rt, err := runtime.New(st)
			if err != nil {
				t.Fatal(err)
			}
			_, got := runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "Pay.Charge", Key: "pu", Request: "r",
				Effect: func(context.Context, string) (string, error) { return "", e }})
			rec, _ := st.Get(context.Background(), runtime.Identity{Operation: "Pay.Charge", Key: "pu"})
			t.Logf("%s: record %s, note %q; returned %v", name, rec.State, rec.Note, got)
		})
	}
}
