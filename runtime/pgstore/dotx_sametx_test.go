package pgstore_test

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

// TestDoTxTwiceInOneTransaction calls DoTx twice with one identity in one
// transaction (a batch that carries an item twice): the second call must be
// answered at once with the first call's outcome, which its own transaction
// holds and will commit, not wait for that transaction (its own) and be
// told ErrInProgress. Within the first call's lease the record is its
// claim, marked with the caller's transaction; past it, the record's row is
// locked by that transaction; with a different request it is the same key
// reused. On the store alone and with group commit; each row commits at
// the end, and a later runtime.Do replays the committed answer.
func TestDoTxTwiceInOneTransaction(t *testing.T) {
	p := testPool(t)
	cases := []struct {
		name    string
		group   bool
		lease   time.Duration
		pause   time.Duration // between the two calls
		request orderReq      // of the second call
		reused  bool          // the second call gets ErrKeyReused
	}{
		{name: "within the lease", lease: 5 * time.Second, request: orderReq{"o-1", 5}},
		{name: "within the lease, group commit", group: true, lease: 5 * time.Second, request: orderReq{"o-1", 5}},
		{name: "past the lease", lease: 200 * time.Millisecond, pause: 600 * time.Millisecond, request: orderReq{"o-1", 5}},
		{name: "past the lease, group commit", group: true, lease: 200 * time.Millisecond, pause: 600 * time.Millisecond, request: orderReq{"o-1", 5}},
		{name: "another request", lease: 5 * time.Second, request: orderReq{"o-1", 6}, reused: true},
		{name: "another request past the lease", lease: 200 * time.Millisecond, pause: 600 * time.Millisecond, request: orderReq{"o-1", 6}, reused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			table := ordersTable(t, p)
			var opts []pgstore.Option
			if tc.group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			// MaxWait is far longer than any answer the second call
			// should need: waiting it out is the failure.
			rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(tc.lease), runtime.WithMaxWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
			var first, second order
			var secondErr error
			var took time.Duration
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				if first, err = pgstore.DoTx(ctx, rt, tx, call); err != nil {
					return err
				}
				time.Sleep(tc.pause)
				again := call
				again.Request = tc.request
				start := time.Now()
				second, secondErr = pgstore.DoTx(ctx, rt, tx, again)
				took = time.Since(start)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("second call: %+v, %v after %v", second, secondErr, took)
			switch {
			case tc.reused && !errors.Is(secondErr, runtime.ErrKeyReused):
				t.Errorf("second call with another request: %+v, %v; want ErrKeyReused", second, secondErr)
			case !tc.reused && (secondErr != nil || second != first):
				t.Errorf("second call in the transaction that holds the answer: %+v, %v; want %+v", second, secondErr, first)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("effect ran %d times, want 1", n)
			}
			if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
				t.Errorf("%d orders committed, want 1", n)
			}
			got, err := runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: call.Operation, Key: call.Key, Request: call.Request,
				Effect: func(ctx context.Context, r orderReq) (order, error) {
					runs.Add(1)
					return order{}, nil
				}})
			if err != nil || got != first {
				t.Errorf("after the commit: %+v, %v; want %+v replayed", got, err, first)
			}
		})
	}
}
