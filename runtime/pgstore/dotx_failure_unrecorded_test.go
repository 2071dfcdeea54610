package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise (runtime.Permanent; DoTx follows runtime.Do): a failure is the
// call's outcome only once it is recorded. Schedule: DoTx's effect fails
// permanently while another session holds the record's row lock past the
// completion timeout, so the FAILED write, committed on its own, cannot
// be made. The caller must not be told the failure (a duplicate runs the
// effect once the lease has passed); the retry runs it, and its success is
// recorded and replayed.
func TestDoTxFailureNotRecordedIsNotFinal(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	const lease = time.Second
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithCompletionTimeout(300*time.Millisecond), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	held := make(chan pgx.Tx, 1)
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if runs.Load() > 0 {
				return insertOrder(table, &runs)(ectx, tx, r)
			}
			runs.Add(1)
			side, err := p.Begin(context.Background())
			if err != nil {
				return order{}, err
			}
			held <- side
			if _, err := side.Exec(context.Background(), "SELECT 1 FROM idem_records WHERE scope=$1 FOR UPDATE", runtime.ScopeFrom(ctx)); err != nil {
				return order{}, err
			}
			return order{}, runtime.Permanent(errors.New("card declined"))
		}}
	first := func() error {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = pgstore.DoTx(ctx, rt, tx, call)
		return err
	}()
	side := <-held
	var rec string
	if err := p.QueryRow(context.Background(), "SELECT state FROM idem_records WHERE scope=$1 AND operation=$2 AND key=$3",
		runtime.ScopeFrom(ctx), call.Operation, call.Key).Scan(&rec); err != nil {
		t.Fatal(err)
	}
	_ = side.Rollback(context.Background())
	var fe *runtime.FailedError
	if first == nil || errors.Is(first, runtime.ErrPermanent) || errors.As(first, &fe) || !strings.Contains(first.Error(), "card declined") {
		t.Fatalf("first call, its FAILED write blocked past the completion timeout: %v (record %s); want an error that is not the failure, quoting it", first, rec)
	}
	if rec != string(runtime.StateProcessing) {
		t.Fatalf("record after the blocked FAILED write: %s; want PROCESSING", rec)
	}
	time.Sleep(lease + 200*time.Millisecond) // the first call's lease passes
	// The FAILED write cut off at the completion timeout may still have
	// been applied once the lock was released (PostgreSQL had not yet
	// seen the cancel): the retries then replay the failure, which is
	// consistent with what the first caller was told (retry). Otherwise
	// the retry runs the effect, and its order is replayed.
	replayed := false
	for i := range 2 {
		var o order
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var err error
			o, err = pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
		switch {
		case errors.As(err, &fe) && runs.Load() == 1:
			replayed = true
		case err != nil || o.Ref != "o-1" || replayed:
			t.Fatalf("call %d after the lease: %+v, %v (the failure replayed before: %v); want the order, or the failure replayed each time", i+2, o, err, replayed)
		}
	}
	want, wantRuns := 1, int32(2)
	if replayed {
		want, wantRuns = 0, 1
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != want || runs.Load() != wantRuns {
		t.Fatalf("%d rows, effect ran %d times; want %d rows, %d runs", n, runs.Load(), want, wantRuns)
	}
	t.Logf("the late FAILED write was applied: %v", replayed)
}
