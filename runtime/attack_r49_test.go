package runtime_test

import (
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r49Ratio is a value error type holding a float (a measured ratio that can
// be NaN, 0/0) whose Unwrap returns the receiver: a cyclic Unwrap.
type r49Ratio struct {
	Ratio float64
}

func (e r49Ratio) Error() string { return "ratio out of bounds" }
func (e r49Ratio) Unwrap() error { return e }

// README: "each visited once, so a cyclic Unwrap ends the walk (and an
// effect's or query's error that is cyclic is flattened before anything
// else walks it". go doc IsTimeout: "each is visited once, so a cyclic
// Unwrap ends the walk".
func TestR49CyclicNaNValueErrorWalkEnds(t *testing.T) {
	e := r49Ratio{Ratio: math.NaN()}
	testenv.Within(t, 15*time.Second, func() {
		// Read whole: a walk that never recognised the value would end
		// only at its bound, and call the tree uncertain.
		if runtime.IsTimeout(e) || runtime.Uncertain(e) {
			t.Error("a cyclic value error with no timeout in it is a timeout")
		}
	})
}

func TestR49CyclicNaNValueErrorDoEnds(t *testing.T) {
	e := r49Ratio{Ratio: math.NaN()}
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		_, err = runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "R49.Ratio", Key: "k1", Request: "r",
			Effect: func(context.Context, string) (string, error) { return "", e }})
		t.Logf("Do returned %v", err != nil)
	})
}

// r49Probe: a downstream error that carries a callback telling whether the
// call timed out (non-comparable: a func field). Two probes of one type,
// same Op, differ only by the closure.
type r49Probe struct {
	Op       string
	timedOut func() bool
}

func (e r49Probe) Error() string { return "probe " + e.Op }
func (e r49Probe) Timeout() bool { return e.timedOut() }

func r49Probes(statuses ...int) []error {
	var errs []error
	for _, s := range statuses {
		errs = append(errs, r49Probe{Op: "charge", timedOut: func() bool { return s == 504 }})
	}
	return errs
}

// go doc IsTimeout: "any error in the tree with a Timeout() bool method
// that returns true ... Every error of the tree is asked".
func TestR49JoinedClosureErrorsTimeoutMissed(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		joined := errors.Join(r49Probes(400, 504)...)
		if !runtime.IsTimeout(errors.Join(r49Probes(504)...)) {
			t.Error("precondition: a lone 504 probe is a timeout")
			return
		}
		if !runtime.IsTimeout(joined) {
			t.Errorf("IsTimeout(Join(400-probe, 504-probe)) = false; the 504 in the tree timed out")
		}
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ctx := context.Background()
		call := runtime.Call[string, string]{Operation: "R49.Probe", Key: "k1", Request: "r",
			Effect: func(context.Context, string) (string, error) { return "", runtime.Permanent(joined) }}
		_, err = runtime.Do(ctx, rt, call)
		if errors.Is(err, runtime.ErrPermanent) {
			t.Errorf("first caller told permanent failure for a timed-out effect: %v", err)
		}
		call.Effect = func(context.Context, string) (string, error) { t.Error("effect ran twice"); return "", nil }
		_, err = runtime.Do(ctx, rt, call)
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Errorf("duplicate: %v, want ErrOutcomeUnknown", err)
		}
	})
}

// README: "A nested call's error the runtime returned as not final (...)
// does not match ErrPermanent, and its timeout, status and marks still
// decide the outer call's outcome. 'Anywhere' is every error of the tree,
// however wide (...) or deep, each visited once".
//
// Schedule: each level's effect calls two nested operations (two keys),
// each of whose effect returns the level below's error marked
// Retryable(Permanent(...)) (released: runtime.Do returns it unmarked),
// and joins what they returned. Every level adds two errors; the tree has
// 2*depth+1 distinct errors.
func TestR49NestedUnmarkedSharedSubtree(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ctx := context.Background()
		root := errors.New("card network refused")
		level := root
		n := 0
		nested := func(below error) error {
			n++
			_, err := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "R49.Nested", Key: "k" + string(rune('A'+n%26)) + time.Now().Format("150405.000000000"), Request: "r",
				Effect: func(context.Context, string) (string, error) { return "", runtime.Retryable(runtime.Permanent(below)) }})
			return err
		}
		start := time.Now()
		for d := 1; d <= 48; d++ {
			level = errors.Join(nested(level), nested(level))
			if d%8 == 0 {
				t.Logf("depth %d built after %v", d, time.Since(start))
			}
		}
		if runtime.IsTimeout(level) || runtime.Uncertain(level) {
			t.Error("a tree with no timeout nor cancellation is a timeout, or uncertain")
		}
		// The standard library's walk of what the runtime returned reads
		// each unmarked error's tree once (its Is walks through the nested
		// ones), and finds the root's sentinel, not the permanent mark.
		if !errors.Is(level, root) || errors.Is(level, runtime.ErrPermanent) || errors.Is(level, io.EOF) {
			t.Error("errors.Is of the nested calls' errors")
		}
	})
}

// r49NoRenew refuses every renewal (a store that does not answer them in
// time, as an error).
type r49NoRenew struct{ runtime.Store }

func (s r49NoRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	return time.Time{}, errors.New("r49: renewal refused")
}

// README, the lease rule: "the effect's context is cancelled with cause
// ErrLeaseLost, and what the effect then returns is recorded by CAS as
// always: UNKNOWN when its error carries the cancellation (an effect that
// honours its context), the success or permanent failure an effect that
// ignored it returned". README, Errors: "ErrLeaseLost | this worker's
// lease was taken over, so its outcome was not recorded; or (as the cause
// of the effect's context) its lease could not be confirmed in time and the
// effect was stopped".
// Schedule: every renewal is refused; the lease rule stops the effect,
// which honours its context and returns context.Cause(ctx) (where a
// control returns ctx.Err()); under each error policy.
func TestR49LeaseRuleCauseReturned(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		for _, pol := range []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.ReleaseRecord, runtime.RecordFailed} {
			for _, ret := range []string{"ctx.Err()", "context.Cause(ctx)"} {
				ms := memstore.New()
				rt, err := runtime.New(r49NoRenew{ms}, runtime.WithErrorPolicy(pol))
				if err != nil {
					t.Error(err)
					return
				}
				runs := 0
				call := runtime.Call[string, string]{Operation: "R49.Lease", Key: "k1", Request: "r", Lease: 600 * time.Millisecond,
					Effect: func(ctx context.Context, _ string) (string, error) {
						runs++
						<-ctx.Done()
						if ret == "ctx.Err()" {
							return "", ctx.Err()
						}
						return "", context.Cause(ctx)
					}}
				_, err1 := runtime.Do(context.Background(), rt, call)
				rec, gerr := ms.Get(context.Background(), runtime.Identity{Operation: "R49.Lease", Key: "k1"})
				state := "absent"
				if gerr == nil {
					state = string(rec.State)
				}
				t.Logf("%v, effect returns %s: record %s; caller: unknown=%v leaseLost=%v (%v)", pol, ret, state,
					errors.Is(err1, runtime.ErrOutcomeUnknown), errors.Is(err1, runtime.ErrLeaseLost), err1)
				if state != string(runtime.StateUnknown) {
					t.Errorf("%v, effect stopped by the lease rule returns %s: record %s, want UNKNOWN (the caller is told %v)", pol, ret, state, err1)
				}
			}
		}
	})
}
