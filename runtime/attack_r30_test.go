package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
)

// r30Cycle unwraps to itself until stop is set.
type r30Cycle struct{ stop *atomic.Bool }

func (e *r30Cycle) Error() string { return "r30: card declined (cyclic error)" }
func (e *r30Cycle) Unwrap() error {
	if e.stop.Load() {
		return nil
	}
	return e
}

// The classification rule (README): every error of a tree is "visited once,
// so a cyclic Unwrap ends the walk instead of looping"; Permanent's doc:
// "the record becomes FAILED, err's message (and code, see Coder) is
// stored, and duplicates get the same failure back". Classify walks the
// cyclic tree fine and says FAILED; EncodeFailure then looks for a Coder
// and a Detailer with errors.As, which has no cycle detection: runtime.Do
// spins after its effect returned, the record PROCESSING with its lease
// renewed (the outcome is "being recorded"), so every duplicate gets
// ErrInProgress for as long as the process lives. The same EncodeFailure
// runs for DoTx's FAILED and for a reconciler query's OutcomeFailed error.
// Schedule: one runtime.Do whose effect returns Permanent(e), e.Unwrap()
// == e, on a 300ms lease; it must return within 15 s; a duplicate is sent
// meanwhile.
func TestR30PermanentCyclicNeverRecorded(t *testing.T) {
	for _, sx := range teststores.All() {
		t.Run(sx.Name, func(t *testing.T) {
			st := sx.New(t)
			rt, err := idem.New(st, idem.WithLease(300*time.Millisecond), idem.WithMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			key := teststores.Unique()
			var stop atomic.Bool
			defer stop.Store(true)
			call := idem.Call[string, int]{Operation: "r30.permcycle", Key: key, Request: "r",
				Effect: func(ctx context.Context, req string) (int, error) { return 0, idem.Permanent(&r30Cycle{&stop}) }}
			ctx := context.Background()
			done := make(chan error, 1)
			go func() {
				_, err := idem.Do(ctx, rt, call)
				done <- err
			}()
			select {
			case err := <-done:
				// Returned: recorded FAILED as Permanent says, and a
				// duplicate gets the failure back.
				rec, gerr := st.Get(ctx, idem.Identity{Operation: "r30.permcycle", Key: key})
				_, dupErr := idem.Do(ctx, rt, call)
				var fe *idem.FailedError
				if !errors.Is(err, idem.ErrPermanent) || gerr != nil || rec.State != idem.StateFailed || !errors.As(dupErr, &fe) {
					t.Fatalf("Do returned %v; record %s (get %v); a duplicate got %v", err, rec.State, gerr, dupErr)
				}
				return
			case <-time.After(15 * time.Second):
			}
			_, dupErr := idem.Do(ctx, rt, call)
			rec, gerr := st.Get(ctx, idem.Identity{Operation: "r30.permcycle", Key: key})
			stop.Store(true)
			<-done
			t.Fatalf("runtime.Do did not return within 15s (50 leases) for Permanent(a cyclic error); record %s, lease until %v (store now %v), get %v; a duplicate got %v (ErrInProgress: %v)",
				rec.State, rec.LeaseExpiresAt, rec.StoreNow, gerr, dupErr, errors.Is(dupErr, idem.ErrInProgress))
		})
	}
}

// F4's walk in the reconciler: a query that answers OutcomeFailed with its
// error (the documented way to say "it failed for good") whose Unwrap is
// cyclic. The reconciler's pass spins in EncodeFailure with its batch
// acquired: RunOnce never returns, and no record of the batch converges.
// Schedule: one UNKNOWN record (its effect timed out), a registered query
// answering OutcomeFailed with the cyclic error, one RunOnce that must
// return within 15 s.
func TestR30ReconcilerFailedCyclicNeverReturns(t *testing.T) {
	st := teststores.All()[0].New(t)
	rt, err := idem.New(st, idem.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	defer stop.Store(true)
	const op = "r30.reconcile.failedcycle"
	query := func(ctx context.Context, req string) (int, idem.Outcome, error) {
		return 0, idem.OutcomeFailed, &r30Cycle{&stop}
	}
	if err := idem.Register(rt, op, query, idem.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	key := teststores.Unique()
	ctx := context.Background()
	_, err = idem.Do(ctx, rt, idem.Call[string, int]{Operation: op, Key: key, Request: "r",
		Effect: func(ctx context.Context, req string) (int, error) { return 0, context.DeadlineExceeded }})
	if !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v", err)
	}
	rec, err := idem.NewReconciler(rt, idem.ReconcileLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rec.RunOnce(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("RunOnce returned %v", err)
	case <-time.After(15 * time.Second):
		r, gerr := st.Get(ctx, idem.Identity{Operation: op, Key: key})
		stop.Store(true)
		<-done
		t.Fatalf("the reconciler's RunOnce did not return within 15s for a query's OutcomeFailed error with a cyclic Unwrap; record %s owner %q (get %v)", r.State, r.Owner, gerr)
	}
}
