package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type r50Req struct {
	N int `json:"n"`
}

// r50Err is a value error that is not comparable (it holds a slice) and so
// is told by "a value's type, references and scalars". Two of them differ
// only by which interface field holds the int: A=1,B=nil vs A=nil,B=1.
type r50Err struct {
	A, B any
	S    []int
}

func (e r50Err) Error() string { return fmt.Sprintf("r50 A=%v B=%v", e.A, e.B) }

// Timeout: the one whose B is set timed out.
func (e r50Err) Timeout() bool { return e.B != nil }

func r50Dup(t *testing.T, rt *idem.Runtime, op, key string, effErr error) (first, dup error) {
	ctx := context.Background()
	call := idem.Call[r50Req, string]{
		Operation: op, Key: key, Request: r50Req{N: 1},
		Effect: func(ctx context.Context, _ r50Req) (string, error) { return "", effErr },
	}
	_, first = idem.Do(ctx, rt, call)
	call.Effect = func(ctx context.Context, _ r50Req) (string, error) {
		t.Error("effect ran again")
		return "ran", nil
	}
	_, dup = idem.Do(ctx, rt, call)
	return first, dup
}

// README "The state machine": "A timeout anywhere in the error tree (... a
// net.Error ... that timed out ...) ... are UNKNOWN under every error policy
// and whatever Permanent or Retryable says: never FAILED, never a release
// ... 'Anywhere' is every error of the tree ... each visited once ... Each
// error is told by its identity: a pointer, an equal value ..., or a
// value's type, references and scalars".
func TestR50NilInterfaceFieldsTakenForOne(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		a := r50Err{A: 1}
		b := r50Err{B: 1} // timed out
		joined := errors.Join(a, b)
		if !idem.IsTimeout(b) {
			t.Errorf("control: IsTimeout(b) = false")
		}
		if !idem.IsTimeout(joined) {
			t.Errorf("IsTimeout(Join(%v, %v)) = false; the second error timed out", a, b)
		}
		if !idem.Uncertain(joined) {
			t.Errorf("Uncertain(Join) = false")
		}
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		if st := rt.Classify(idem.Permanent(joined)); st != idem.StateUnknown {
			t.Errorf("Classify(Permanent(Join)) = %q, want UNKNOWN", st)
		}
		first, dup := r50Dup(t, rt, "R50.NilIface", "k-r50-nil", idem.Permanent(joined))
		if !errors.Is(dup, idem.ErrOutcomeUnknown) {
			t.Errorf("duplicate after a timed-out effect: %v (FailedError=%v), want ErrOutcomeUnknown; first call: %v",
				dup, errors.Is(dup, idem.ErrPermanent), first)
		}
	})
}

type r50Zero struct{ F float64 }

func (e r50Zero) Error() string { return fmt.Sprintf("r50 zero %v", e.F) }
func (e r50Zero) Timeout() bool { return math.Signbit(e.F) }

// Observation: -0.0 and 0.0 are == equal, so two errors that differ only by
// the zero's sign are taken for one.
func TestR50NegativeZero(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		joined := errors.Join(r50Zero{0}, r50Zero{math.Copysign(0, -1)})
		if !idem.IsTimeout(joined) {
			t.Errorf("IsTimeout(Join(0.0, -0.0)) = false; the second timed out")
		}
	})
}

// r50Bound builds Permanent(Join(leaves)) with exactly 65,536 distinct
// errors: the classified mark, the join and 65,534 leaves; shared repeats
// leaf 0 once in the join (a subtree shared by two paths).
func r50Bound(shared bool) error {
	leaves := make([]error, 0, 65535)
	for i := 0; i < 65534; i++ {
		leaves = append(leaves, fmt.Errorf("leaf %d", i))
	}
	if shared {
		leaves = append(leaves, leaves[0])
	}
	return idem.Permanent(errors.Join(leaves...))
}

// README "The state machine": "A walk reads at most 65,536 errors ...: a
// tree larger than that is uncertain." and "an effect's or query's error
// that is cyclic, or shares a subtree, is flattened before anything else
// walks it ...: its message, and what errors.Is and errors.As find in it,
// are kept". A Permanent error of exactly 65,536 errors is FAILED.
func TestR50ExactBound(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			testenv.Within(t, 60*time.Second, func() {
				rt, err := idem.New(memstore.New())
				if err != nil {
					t.Error(err)
					return
				}
				e := r50Bound(shared)
				if st := rt.Classify(e); st != idem.StateFailed {
					t.Errorf("Classify = %q, want FAILED", st)
				}
				first, dup := r50Dup(t, rt, "R50.Bound", fmt.Sprintf("k-r50-bound-%v", shared), e)
				if !errors.Is(dup, idem.ErrPermanent) {
					t.Errorf("duplicate: %.200v; want a *FailedError (FAILED). first is ErrOutcomeUnknown=%v",
						dup, errors.Is(first, idem.ErrOutcomeUnknown))
				}
			})
		})
	}
}

var errR50Sentinel = errors.New("r50 sentinel")

// r50IsErr matches errR50Sentinel only when B is set.
type r50IsErr struct {
	A, B any
	S    []int
}

func (e r50IsErr) Error() string        { return fmt.Sprintf("r50is A=%v B=%v", e.A, e.B) }
func (e r50IsErr) Is(target error) bool { return target == errR50Sentinel && e.B != nil }

// README "The state machine": "an effect's or query's error that is cyclic,
// or shares a subtree, is flattened before anything else walks it ...: its
// message, and what errors.Is and errors.As find in it, are kept".
func TestR50FlattenDropsError(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		shared := errors.New("shared")
		orig := idem.Permanent(errors.Join(shared, shared, r50IsErr{A: 1}, r50IsErr{B: 1}))
		if !errors.Is(orig, errR50Sentinel) {
			t.Error("control: errors.Is(orig, sentinel) = false")
		}
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		first, _ := r50Dup(t, rt, "R50.Flat", "k-r50-flat", orig)
		if first == nil {
			t.Error("first call: nil error")
			return
		}
		if !errors.Is(first, errR50Sentinel) {
			t.Errorf("errors.Is(orig, sentinel) = true, but errors.Is(Do's error, sentinel) = false; Do's error: %q", first)
		}
		var got r50IsErr
		if errors.As(first, &got) && got.A == nil {
			t.Errorf("errors.As found %v", got)
		}
	})
}

// r50Cycle's Unwrap panics on its first call only, then returns itself:
// a cycle.
type r50Cycle struct{ calls *int }

func (e *r50Cycle) Error() string { return "r50 cycle" }
func (e *r50Cycle) Unwrap() error {
	*e.calls++
	if *e.calls == 1 {
		panic("r50: first Unwrap")
	}
	return e
}

func TestR50CycleOncePanicking(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		n := 0
		first, _ := r50Dup(t, rt, "R50.Cycle", "k-r50-cycle", idem.Permanent(&r50Cycle{calls: &n}))
		// The call ends. What it returns is the error as it is: one whose
		// Unwrap panicked while the runtime flattened it is not flattened
		// (README: read under recover), so the standard library's walk
		// of it, which keeps no visited set, would not end (review r50:
		// documented, not changed).
		t.Logf("first: %v", first)
	})
}

// r50StuckRenew is a memstore whose Renew does not answer while stuck is
// set (until its context ends).
type r50StuckRenew struct {
	*memstore.Store
	stuck chan struct{} // closed: renewals answer again
}

func (s *r50StuckRenew) Renew(ctx context.Context, p idem.RenewParams) (time.Time, error) {
	select {
	case <-s.stuck:
		return s.Store.Renew(ctx, p)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// README, the lease rule: "the effect's context is cancelled with cause
// ErrLeaseLost, and what the effect then returns is recorded by CAS as
// always: UNKNOWN when its error carries the cancellation (an effect that
// honours its context, returning ctx.Err() or context.Cause(ctx))"; README
// Errors table, ErrLeaseLost: "an effect that returns it, or a nested
// call's, is UNKNOWN"; "whatever Permanent or Retryable says".
func TestR50LeaseRuleCauseMarked(t *testing.T) {
	cases := map[string]func(ctx context.Context) error{
		"retryable-cause": func(ctx context.Context) error { return idem.Retryable(context.Cause(ctx)) },
		"permanent-cause": func(ctx context.Context) error { return idem.Permanent(fmt.Errorf("x: %w", context.Cause(ctx))) },
		"retryable-err":   func(ctx context.Context) error { return idem.Retryable(ctx.Err()) },
		"joined-cause": func(ctx context.Context) error {
			return errors.Join(idem.Retryable(errors.New("a")), context.Cause(ctx))
		},
		"nested-leaselost": func(ctx context.Context) error { return idem.Retryable(fmt.Errorf("nested: %w", idem.ErrLeaseLost)) },
	}
	for name, ret := range cases {
		t.Run(name, func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				st := &r50StuckRenew{Store: memstore.New(), stuck: make(chan struct{})}
				rt, err := idem.New(st, idem.WithLease(600*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				call := idem.Call[r50Req, string]{
					Operation: "R50.Lease", Key: "k-r50-lease-" + name, Request: r50Req{N: 1},
					Effect: func(ctx context.Context, _ r50Req) (string, error) {
						if name != "nested-leaselost" {
							<-ctx.Done()
						}
						return "", ret(ctx)
					},
				}
				_, first := idem.Do(context.Background(), rt, call)
				close(st.stuck)
				call.Effect = func(ctx context.Context, _ r50Req) (string, error) {
					t.Error("effect ran again")
					return "", nil
				}
				_, dup := idem.Do(context.Background(), rt, call)
				t.Logf("first: %v; dup: %v", first, dup)
				if !errors.Is(dup, idem.ErrOutcomeUnknown) {
					t.Errorf("duplicate: %v, want ErrOutcomeUnknown", dup)
				}
			})
		})
	}
}

// r50NetTimeout is a downstream's net.Error that timed out.
type r50NetTimeout struct{}

func (*r50NetTimeout) Error() string   { return "dial tcp 10.0.0.1:443: i/o timeout" }
func (*r50NetTimeout) Timeout() bool   { return true }
func (*r50NetTimeout) Temporary() bool { return true }

// README "The state machine": "an effect's or query's error that is
// cyclic, or shares a subtree, is flattened before anything else walks it
// ...: its message, and what errors.Is and errors.As find in it, are kept".
// Schedule: an effect fails with errors.Join of a shared cause (twice) and
// a plain error (permanent), or a net.Error timeout (UNKNOWN); the caller
// asks errors.As for a net.Error in what runtime.Do returned.
func TestR50FlattenAsNetError(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		shared := errors.New("shared cause")
		cases := map[string]error{
			"no-net-error": idem.Permanent(errors.Join(shared, shared, errors.New("card declined"))),
			"net-timeout":  errors.Join(shared, shared, &r50NetTimeout{}),
		}
		for name, orig := range cases {
			rt, err := idem.New(memstore.New())
			if err != nil {
				t.Error(err)
				return
			}
			var ne1 net.Error
			found1 := errors.As(orig, &ne1)
			first, _ := r50Dup(t, rt, "R50.FlatAs", "k-r50-flatas-"+name, orig)
			var ne2 net.Error
			found2 := errors.As(first, &ne2)
			t1, t2 := found1 && ne1.Timeout(), found2 && ne2.Timeout()
			t.Logf("%s: original: found=%v timeout=%v; Do's error (%q): found=%v (%T %q) timeout=%v", name, found1, t1, first, found2, ne2, ne2, t2)
			if found1 != found2 || t1 != t2 {
				t.Errorf("%s: errors.As(err, *net.Error-like) on the effect's error: found=%v Timeout()=%v; on runtime.Do's error: found=%v Timeout()=%v",
					name, found1, t1, found2, t2)
			}
		}
	})
}

type r50Loop struct{ next error }

func (e *r50Loop) Error() string { return "r50 loop" }
func (e *r50Loop) Unwrap() error { return e.next }

type r50BadUnwrap struct{}

func (r50BadUnwrap) Error() string { return "r50 bad unwrap" }
func (r50BadUnwrap) Unwrap() error { panic("r50: Unwrap") }

// Cyclic error beside an error whose Unwrap always panics.
func TestR50CycleBesidePanickingUnwrap(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		loop := &r50Loop{}
		loop.next = fmt.Errorf("via: %w", loop)
		var first error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("runtime.Do panicked: %v", p)
				}
			}()
			first, _ = r50Dup(t, rt, "R50.CycleBad", "k-r50-cyclebad", idem.Permanent(errors.Join(loop, r50BadUnwrap{})))
		}()
		t.Logf("first: %v", first)
		done := make(chan bool)
		go func() {
			defer func() { recover(); done <- true }()
			errors.Is(first, errR50Sentinel)
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Errorf("errors.Is on runtime.Do's error does not end (cyclic error returned unflattened)")
		}
	})
}

type r50Coded struct{ code string }

func (e *r50Coded) Error() string     { return "coded " + e.code }
func (e *r50Coded) ErrorCode() string { return e.code }

// go doc Coder: "The code of a permanent error is stored with its message
// and returned by FailedError.Code on replay." With a shared subtree
// (flattened) the code must be the same as without.
func TestR50FlattenCode(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		shared := errors.New("shared")
		for name, orig := range map[string]error{
			"plain":  idem.Permanent(errors.Join(errors.New("x"), &r50Coded{"card_declined"})),
			"shared": idem.Permanent(errors.Join(shared, shared, &r50Coded{"card_declined"})),
		} {
			rt, _ := idem.New(memstore.New())
			_, dup := r50Dup(t, rt, "R50.Code", "k-r50-code-"+name, orig)
			var fe *idem.FailedError
			if !errors.As(dup, &fe) {
				t.Errorf("%s: dup %v", name, dup)
				continue
			}
			t.Logf("%s: code %q message %q", name, fe.Code, fe.Message)
			if fe.Code != "card_declined" {
				t.Errorf("%s: code %q", name, fe.Code)
			}
		}
	})
}
