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

// TestR39ReconcilerTurnsRolledBackDoTxClaimUnknown: DoTx's doc: "If the
// caller rolls its transaction back after DoTx succeeded, nothing remains of
// the effect: the claim, still PROCESSING but naming a transaction that has
// ended, is taken over at once by the next duplicate, which runs the
// effect". A reconciler that runs between the rollback and the retry (the
// operation registered with a no-query policy, or a query) acquires that
// claim as a PROCESSING record "whose worker died" and makes it UNKNOWN:
// the retry, for an effect that certainly did not happen (its writes rolled
// back), is told the outcome is unknown, and under NotHappenedFail the call
// ends FAILED without ever running.
func TestR39ReconcilerTurnsRolledBackDoTxClaimUnknown(t *testing.T) {
	for _, after := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) { r39RolledBackClaim(t, after) })
	}
}

func r39RolledBackClaim(t *testing.T, after time.Duration) {
	p := r28Pool(t, 6)
	st := pgstore.New(p)
	rt, err := runtime.New(st, runtime.WithLease(20*time.Second), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r39.book"
	if err := runtime.RegisterNoQuery(rt, op, runtime.NoQueryPolicy{After: after, Resolve: runtime.NotHappenedFail}); err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r39")
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
		if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
			t.Errorf("DoTx: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil { // nothing of the effect remains
			t.Error(err)
		}
		rec, err := runtime.NewReconciler(rt)
		if err != nil {
			t.Error(err)
			return
		}
		for range 2 {
			time.Sleep(10 * time.Millisecond)
			stats, err := rec.RunOnce(ctx)
			t.Logf("reconciler pass: %+v (%v)", stats, err)
		}
		// The void claim is gone: nothing of it committed, and no sweep
		// would ever delete a PROCESSING row.
		if got, err := st.Get(ctx, runtime.Identity{Scope: "r39", Operation: op, Key: "k1"}); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("record after the pass: %s, lease until %v (store now %v), attempts %d (%v); want it deleted, the claim void", got.State, got.LeaseExpiresAt, got.StoreNow, got.Attempts, err)
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
		if derr != nil || out != "booked" || runs.Load() != 2 || r28Rows(t, p) != 1 {
			t.Errorf("the retry after the rollback: %q, %v (effect ran %d times, %d rows); want the effect run again and booked", out, derr, runs.Load(), r28Rows(t, p))
		}
	})
}
