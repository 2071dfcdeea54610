package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestR40ReconcilerFailsClaimOfRolledBackSavepoint: the caller ran DoTx in
// a savepoint, rolled the savepoint back (effect and SUCCESS write gone),
// kept its transaction open past the lease, then committed without the
// SUCCESS write. DoTx's doc: such a claim (one "whose transaction commits
// without the SUCCESS write, e.g. after rolling back a savepoint around
// DoTx") is void, and "a reconciler that comes first deletes such a void
// claim, never makes it UNKNOWN". A reconciler pass while the transaction
// was still open took the claim as a dead worker's (UNKNOWN), and under
// NotHappenedFail the retry is FAILED without the effect ever committing.
func TestR40ReconcilerFailsClaimOfRolledBackSavepoint(t *testing.T) {
	for _, after := range []time.Duration{time.Millisecond, time.Hour} {
		t.Run(after.String(), func(t *testing.T) { r40SavepointClaim(t, after) })
	}
}

func r40SavepointClaim(t *testing.T, after time.Duration) {
	p := r28Pool(t, 6)
	st := pgstore.New(p)
	rt, err := runtime.New(st, runtime.WithLease(time.Second), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r40.book"
	if err := runtime.RegisterNoQuery(rt, op, runtime.NoQueryPolicy{After: after, Resolve: runtime.NotHappenedFail}); err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r40")
	var runs atomic.Int32
	call := pgstore.TxCall[r28Req, string]{Operation: op, Key: "k1", Request: r28Req{Ref: "o1"},
		Effect: func(ctx context.Context, tx pgx.Tx, r r28Req) (string, error) {
			runs.Add(1)
			_, err := tx.Exec(ctx, "INSERT INTO r28_orders (ref) VALUES ($1)", r.Ref)
			return "booked", err
		}}
	testenv.Within(t, 15*time.Second, func() {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(context.Background())
		sp, err := tx.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := pgstore.DoTx(ctx, rt, sp, call); err != nil {
			t.Errorf("DoTx: %v", err)
			return
		}
		if err := sp.Rollback(ctx); err != nil { // nothing of the effect remains
			t.Error(err)
			return
		}
		time.Sleep(1500 * time.Millisecond) // the transaction goes on past the lease
		rec, err := runtime.NewReconciler(rt)
		if err != nil {
			t.Error(err)
			return
		}
		for range 2 {
			stats, err := rec.RunOnce(ctx)
			t.Logf("reconciler pass: %+v (%v)", stats, err)
			time.Sleep(10 * time.Millisecond)
		}
		if err := tx.Commit(ctx); err != nil { // commits without the SUCCESS write: the claim is void
			t.Error(err)
			return
		}
		// The reconciler deleted the void claim (its transaction still open
		// then, its SUCCESS write rolled back with the savepoint).
		if got, gerr := st.Get(ctx, runtime.Identity{Scope: "r40", Operation: op, Key: "k1"}); !errors.Is(gerr, runtime.ErrNotFound) {
			t.Errorf("record after the passes and the commit: %s attempts %d note %q (%v); want it deleted, the claim void", got.State, got.Attempts, got.Note, gerr)
		}
		tx2, err := p.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		out, derr := pgstore.DoTx(ctx, rt, tx2, call)
		if err := tx2.Commit(ctx); err != nil {
			t.Errorf("commit: %v", err)
		}
		if derr != nil || out != "booked" || r28Rows(t, p) != 1 {
			t.Errorf("the retry after the void claim: %q, %v (effect ran %d times, %d rows committed); want the effect run and booked", out, derr, runs.Load(), r28Rows(t, p))
		}
	})
}
