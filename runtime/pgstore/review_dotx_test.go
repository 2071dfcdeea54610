package pgstore_test

// Adversarial review (h9): attacks on DoTx's promises on PostgreSQL.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise: DoTx runs a local effect exactly once per identity. Attack: the
// same identity twice in one caller transaction (a batch with a repeated
// item). The second call must replay the first's response or refuse, never
// write the effect's rows a second time.
func TestReviewDoTxSameKeyTwiceInOneTransaction(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "k1", Request: orderReq{"order-8", 800}, Effect: insertOrder(table, &runs)}
	var first, second order
	var err2 error
	t0 := time.Now()
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		if first, err = pgstore.DoTx(ctx, rt, tx, call); err != nil {
			return err
		}
		second, err2 = pgstore.DoTx(ctx, rt, tx, call)
		return nil
	})
	took := time.Since(t0)
	t.Logf("first %+v; second %+v, %v; %v", first, second, err2, took.Round(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if rows := count(t, p, "SELECT count(*) FROM "+table); rows != 1 || runs.Load() != 1 {
		t.Fatalf("%d rows, effect ran %d times for one identity in one transaction", rows, runs.Load())
	}
	if err2 != nil && !errors.Is(err2, runtime.ErrInProgress) {
		t.Fatalf("second call in the same transaction: %v", err2)
	}
}

// Promise: "SUCCESS is a compare-and-set from that claim inside your
// transaction, so it commits with the effect's rows or not at all (a
// worker that lost its lease meanwhile commits nothing)". Schedule: while
// the effect runs (its row already inserted in the caller's transaction),
// another worker takes the record over (simulated by a CAS on another
// connection, as a takeover after a stall would write). DoTx must fail
// and leave nothing of the effect in the caller's transaction, even if the
// caller, a batch job that logs errors and goes on, commits.
func TestReviewDoTxLeaseLostCommitsNothing(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	ins := insertOrder(table, &runs)
	var dotxErr error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, dotxErr = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{
			Operation: "Orders.Create", Key: "k-stolen", Request: orderReq{"order-9", 900},
			Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
				o, err := ins(ctx, tx, r)
				if err != nil {
					return o, err
				}
				tag, err := p.Exec(context.Background(), `UPDATE idem_records SET owner = 'thief', version = version + 1000,
					lease_expires_at = clock_timestamp() + interval '1 minute', takeovers = takeovers + 1
					WHERE scope = $1 AND operation = $2 AND key = $3 AND state = 'PROCESSING'`,
					runtime.ScopeFrom(ctx), "Orders.Create", "k-stolen")
				if err != nil || tag.RowsAffected() != 1 {
					t.Errorf("simulated takeover: %v, %v", tag, err)
				}
				return o, nil
			},
		})
		return nil // the caller logs dotxErr and commits the rest of its batch
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := count(t, p, "SELECT count(*) FROM "+table)
	t.Logf("DoTx: %v; rows committed: %d", dotxErr, rows)
	if dotxErr == nil {
		t.Fatalf("DoTx succeeded after its lease was taken over")
	}
	if rows != 0 {
		t.Fatalf("a DoTx that lost its lease (%v) left %d effect rows in the caller's transaction, committed beside the new owner's effect", dotxErr, rows)
	}
}
