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

// TestR37ResolveReleaseBesideOpenDoTx: a DoTx call returned success, its
// caller keeps the transaction open past the lease (the SUCCESS write
// uncommitted, the claim PROCESSING with an expired lease in every other
// session's view). An operator runs Resolve(released) on what looks like a
// PROCESSING record whose worker died. Resolve's doc: it "refuses ...
// held by a live lease" and "never overwrites a record it has not taken";
// DoTx's: a duplicate "never runs the effect while this call's
// transaction is open". Then the transaction commits; a retry must replay.
func TestR37ResolveReleaseBesideOpenDoTx(t *testing.T) {
	for _, to := range []runtime.ResolveTo{runtime.ResolveReleased, runtime.ResolveFailed} {
		t.Run(string(to), func(t *testing.T) {
			p := r28Pool(t, 6)
			st := pgstore.New(p)
			rt, err := runtime.New(st, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r37")
			if _, err := p.Exec(ctx, "CREATE TABLE r37_rows (v text)"); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			call := pgstore.TxCall[string, string]{Operation: "r37.book", Key: "k1", Request: "x",
				Effect: func(ctx context.Context, tx pgx.Tx, r string) (string, error) {
					runs.Add(1)
					_, err := tx.Exec(ctx, "INSERT INTO r37_rows VALUES ('booked')")
					return "booked", err
				}}
			id := runtime.Identity{Scope: "r37", Operation: "r37.book", Key: "k1"}
			testenv.Within(t, 15*time.Second, func() {
				// On a loaded machine the call's renewals may not be confirmed
				// within its 300 ms lease (ErrLeaseLost: the effect did not
				// start, or was stopped and its writes rolled back with the
				// transaction; ErrRollbackRequired: it was stopped inside a
				// statement, whose ended context made pgx close the
				// connection): the setup is tried again, at most 3 times,
				// counting effects from none (the table is empty again).
				var tx pgx.Tx
				for try := 1; ; try++ {
					var err error
					if tx, err = p.Begin(ctx); err != nil {
						t.Error(err)
						return
					}
					_, err = pgstore.DoTx(ctx, rt, tx, call)
					if err == nil {
						break
					}
					tx.Rollback(ctx)
					if (errors.Is(err, runtime.ErrLeaseLost) || errors.Is(err, pgstore.ErrRollbackRequired)) && try < 3 {
						t.Logf("try %d: DoTx: %v; trying again", try, err)
						runs.Store(0)
						continue
					}
					t.Errorf("DoTx: %v", err)
					return
				}
				time.Sleep(900 * time.Millisecond) // three leases, the transaction open
				res := runtime.Resolution{ID: id, To: to, Reason: "worker looks dead", Owner: "idemctl:r37"}
				if to == runtime.ResolveFailed {
					res.Failure = runtime.Permanent(errors.New("declined by hand"))
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, rerr := runtime.Resolve(rctx, st, res)
				cancel()
				t.Logf("Resolve beside the open transaction: %v", rerr)
				if err := tx.Commit(ctx); err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				rec, gerr := st.Get(ctx, id)
				t.Logf("record after commit: %s %q (%v)", rec.State, rec.Note, gerr)
				tx2, err := p.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				out, derr := pgstore.DoTx(ctx, rt, tx2, call)
				tx2.Commit(ctx)
				var n int
				p.QueryRow(ctx, "SELECT count(*) FROM r37_rows").Scan(&n)
				if runs.Load() != 1 || n != 1 {
					t.Errorf("after Resolve(%s) beside the open transaction and its commit, a retry: %q %v; the effect ran %d times, %d rows committed, want 1 and 1 (Resolve: %v)", to, out, derr, runs.Load(), n, rerr)
				}
				if rerr == nil {
					t.Errorf("Resolve(%s) succeeded on a record whose DoTx transaction was open", to)
				}
			})
		})
	}
}
