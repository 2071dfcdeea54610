package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type r30Req struct{ Ref string }

// r30PermErr is a domain error that says it is a permanent failure the
// way the sentinel's doc invites: it matches runtime.ErrPermanent.
type r30PermErr struct{ msg string }

func (e *r30PermErr) Error() string        { return e.msg }
func (e *r30PermErr) Is(target error) bool { return target == runtime.ErrPermanent }

// Classification across doors (brief, item 0; row 25.41 (b)): DoTx now
// reads an effect error's mark "as Classify does", and keeps "an unmarked
// error matching ErrPermanent" permanent. ErrPermanent's doc: "ErrPermanent
// marks errors that are stored as FAILED and replayed to duplicates".
// Classify (the one place that decides for runtime.Do, the adapters and
// generated wrappers) only looks for a Permanent/Retryable mark: an
// unmarked error matching ErrPermanent goes to the error policy, UNKNOWN by
// default. So the same error tree is FAILED under DoTx and UNKNOWN under
// runtime.Do (and released under ReleaseRecord): the doors disagree, and
// runtime.Do contradicts ErrPermanent's doc.
// Schedule: one call per door, the effect returns the tree; the record is
// read back.
func TestR30SentinelPermanentDoVsDoTx(t *testing.T) {
	cases := map[string]func() error{
		"wrapped-sentinel": func() error { return fmt.Errorf("card declined: %w", runtime.ErrPermanent) },
		"is-method":        func() error { return &r30PermErr{"card declined"} },
		"nested-failed": func() error {
			return fmt.Errorf("inner call: %w", &runtime.FailedError{Operation: "inner", Key: "k", Message: "declined"})
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			p := r28Pool(t, 4)
			st := pgstore.New(p)
			rt, err := runtime.New(st)
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r30")
			_, derr := runtime.Do(ctx, rt, runtime.Call[r30Req, int64]{Operation: "r30.perm.do", Key: "k", Request: r30Req{"a"},
				Effect: func(context.Context, r30Req) (int64, error) { return 0, mk() }})
			drec, gerr := st.Get(ctx, runtime.Identity{Scope: "r30", Operation: "r30.perm.do", Key: "k"})
			if gerr != nil {
				t.Fatal(gerr)
			}
			var runs atomic.Int32
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, terr := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[r30Req, int64]{Operation: "r30.perm.tx", Key: "k", Request: r30Req{"a"},
				Effect: func(ctx context.Context, tx pgx.Tx, r r30Req) (int64, error) { runs.Add(1); return 0, mk() }})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			trec, gerr := st.Get(ctx, runtime.Identity{Scope: "r30", Operation: "r30.perm.tx", Key: "k"})
			t.Logf("Classify: %q; runtime.Do: %v -> record %s; DoTx: %v -> record %s (%v)", rt.Classify(mk()), derr, drec.State, terr, trec.State, gerr)
			if (drec.State == runtime.StateFailed) != (gerr == nil && trec.State == runtime.StateFailed) {
				t.Fatalf("the same effect error is %s under runtime.Do and %s (get: %v) under DoTx: ErrPermanent's doc says errors it marks are stored as FAILED; the doors disagree",
					drec.State, trec.State, gerr)
			}
		})
	}
}

// r30CycleErr unwraps to itself (a cyclic Unwrap) until stop is set: the
// README's classification rule says every error of a tree is "visited
// once, so a cyclic Unwrap ends the walk instead of looping".
type r30CycleErr struct {
	stop   *atomic.Bool
	unwrap *atomic.Int64
}

func (e *r30CycleErr) Error() string { return "r30: downstream said no (cyclic error)" }
func (e *r30CycleErr) Unwrap() error {
	e.unwrap.Add(1)
	if e.stop.Load() {
		return nil
	}
	return e
}

// The classification rule (README, docs/reliability.md "The rules every
// door keeps"): "'Anywhere' is every error of the tree ... each visited
// once, so a cyclic Unwrap ends the walk instead of looping. One function
// decides (runtime.Uncertain, and (*Runtime).Classify ...)". runtime.Do
// classifies an effect error with a cyclic Unwrap (UNKNOWN by default) and
// returns. DoTx, after rolling back its savepoint, asks errorPermanent,
// which for an unmarked error falls back to errors.Is(err, ErrPermanent):
// errors.Is has no cycle detection, so DoTx spins forever, holding the
// caller's transaction and its claim (the claim's renewals were stopped
// before). (With an Unwrap() []error cycle errors.Is recurses instead: a
// fatal stack overflow of the whole process.)
// Schedule: one runtime.Do and one DoTx whose effects return the cyclic
// error; each must return within 15 s. The test then breaks the cycle so
// that the spinning goroutine ends.
func TestR30DoTxCyclicUnwrapNeverReturns(t *testing.T) {
	p := r28Pool(t, 4)
	st := pgstore.New(p)
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r30")
	var stop atomic.Bool
	var unwraps atomic.Int64
	cyc := &r30CycleErr{stop: &stop, unwrap: &unwraps}
	defer stop.Store(true)

	doDone := make(chan error, 1)
	go func() {
		_, err := runtime.Do(ctx, rt, runtime.Call[r30Req, int64]{Operation: "r30.cycle.do", Key: "k", Request: r30Req{"a"},
			Effect: func(context.Context, r30Req) (int64, error) { return 0, cyc }})
		doDone <- err
	}()
	select {
	case err := <-doDone:
		t.Logf("runtime.Do returned: %v (Unwrap called %d times)", err, unwraps.Load())
	case <-time.After(15 * time.Second):
		stop.Store(true)
		t.Fatalf("runtime.Do did not return within 15s on a cyclic error")
	}

	before := unwraps.Load()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	txDone := make(chan error, 1)
	go func() {
		_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[r30Req, int64]{Operation: "r30.cycle.tx", Key: "k", Request: r30Req{"a"},
			Effect: func(ctx context.Context, tx pgx.Tx, r r30Req) (int64, error) { return 0, cyc }})
		txDone <- err
	}()
	select {
	case err := <-txDone:
		t.Logf("DoTx returned: %v", err)
	case <-time.After(15 * time.Second):
		n := unwraps.Load() - before
		rec, gerr := st.Get(context.Background(), runtime.Identity{Scope: "r30", Operation: "r30.cycle.tx", Key: "k"})
		stop.Store(true) // let the spinning walk end
		<-txDone
		t.Fatalf("DoTx did not return within 15s on an effect error with a cyclic Unwrap (Unwrap called %d times meanwhile; record %s owner %q, lease until %v, get %v): the walk loops, while runtime.Do classified the same error and returned",
			n, rec.State, rec.Owner, rec.LeaseExpiresAt, gerr)
	}
}
