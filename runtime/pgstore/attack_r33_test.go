package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r33UnwrapNilPanic: an effect's error whose Unwrap panics with nil
// (recover returns nil under GODEBUG=panicnil=1).
type r33UnwrapNilPanic struct{}

func (r33UnwrapNilPanic) Error() string { return "ledger: insufficient funds on the second leg" }
func (r33UnwrapNilPanic) Unwrap() error { panic(nil) }

// DoTx's doc: "When the effect fails, DoTx rolls back to its savepoint
// (the effect's writes are gone; the caller's transaction stays usable)
// and returns the error"; README.md:727-730: "panic(nil) under
// GODEBUG=panicnil=1 ... is a panic like any other, never a return";
// README.md:716-718: an error whose Unwrap panics "is recorded with a note
// saying so".
//
// DoTx runs runtime.DoLocal, whose runEffect returns
// errtree.Acyclic(err): Acyclic recovers a panic of the error's Unwrap and
// sets its result only when recover's value is not nil. Under panicnil=1
// the effect's error becomes nil: DoTx writes SUCCESS, keeps the savepoint
// and returns nil, so the caller commits the half of the effect that ran
// before it failed, recorded as done for good.
func TestR33DoTxEffectErrorUnwrapPanicNilCommitsHalfEffect(t *testing.T) {
	testenv.SetPanicNil(t)
	p := r28Pool(t, 4)
	st := pgstore.New(p)
	rt, err := runtime.New(st, runtime.WithLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r33")
	if _, err := p.Exec(ctx, "CREATE TABLE r33_legs (leg text)"); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	testenv.Within(t, 15*time.Second, func() {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		_, derr := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[string, string]{Operation: "r33.transfer", Key: "k1", Request: "100 EUR",
			Effect: func(ctx context.Context, tx pgx.Tx, r string) (string, error) {
				runs.Add(1)
				if _, err := tx.Exec(ctx, "INSERT INTO r33_legs VALUES ('debit')"); err != nil {
					return "", err
				}
				return "", r33UnwrapNilPanic{} // the credit leg failed
			}})
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
			return
		}
		var legs int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM r33_legs").Scan(&legs); err != nil {
			t.Error(err)
			return
		}
		rec, gerr := st.Get(ctx, runtime.Identity{Scope: "r33", Operation: "r33.transfer", Key: "k1"})
		t.Logf("DoTx: %v; legs committed: %d; record %s (%v)", derr, legs, rec.State, gerr)
		if derr == nil {
			t.Errorf("the effect returned an error and DoTx returned nil")
		}
		if legs != 0 {
			t.Errorf("the failed effect's write was committed (%d row): DoTx kept its savepoint", legs)
		}
		if gerr == nil && rec.State == runtime.StateSuccess {
			t.Errorf("the record of a failed DoTx effect is SUCCESS: every retry is told it succeeded")
		}
	})
}
