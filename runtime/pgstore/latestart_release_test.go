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

// A caller never waits for its own transaction, even after a late start:
// a DoTx call whose claim was answered so late that it confirms its lease
// first, and whose confirming renewal fails, ran nothing and named no
// transaction on its claim; the caller rolls back its savepoint and calls
// DoTx again in the same transaction, which must run the effect at once.
// Schedule: the claim's insert waits 0.92 lease after its read (so the
// store's lease runs a whole lease from then), the first renewal fails,
// and the second call is told not to wait. Before, it was told
// ErrInProgress on its own transaction's claim (the doors simulation saw
// the wait under load).
func TestDoTxLateStartNotConfirmedThenSavepointRetry(t *testing.T) {
	const lease = 2 * time.Second
	p := testPool(t)
	table := ordersTable(t, p)
	s := pgstore.New(p)
	pgstore.SetClaimOrder(s, 1) // read first, so the hook runs before the insert
	var misses atomic.Int32
	pgstore.SetAfterReadMiss(s, func() {
		if misses.Add(1) == 1 {
			time.Sleep(lease * 92 / 100)
		}
	})
	pgstore.SetRenewHook(s, func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
		if n == 1 {
			return time.Time{}, errors.New("renew: the store is unreachable")
		}
		return renew()
	})
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: orderReq{OrderID: "o-1", Amount: 7},
		Effect: insertOrder(table, &runs)}
	var first, second error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		_, first = pgstore.DoTx(ctx, rt, sp, call)
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, second = pgstore.DoTx(ctx, rt, tx, call)
		return second
	})
	if first == nil || !strings.Contains(first.Error(), "the effect did not run") {
		t.Fatalf("first call: %v, want the late start's failure", first)
	}
	if err != nil {
		t.Fatalf("the savepoint retry in the same transaction: %v, want the effect run at once", err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d orders committed, %d effects; want 1", n, runs.Load())
	}
	got, err := runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: call.Operation, Key: call.Key, Request: call.Request,
		Effect: func(context.Context, orderReq) (order, error) { runs.Add(1); return order{}, nil }})
	if err != nil || got.Ref != "o-1" || runs.Load() != 1 {
		t.Fatalf("a duplicate after the commit: %+v, %v (%d effects); want the replay", got, err, runs.Load())
	}
}
