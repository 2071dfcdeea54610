package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
			// The first call's own lease is not what this test is about:
			// one the lease rule stops (on a loaded machine its renewals
			// may not be confirmed within 200 ms) is tried again, at most
			// 3 times, with a fresh table and scope.
			for try := 1; ; try++ {
				if tryDoTxTwice(t, p, try, tc.group, tc.lease, tc.pause, tc.request, tc.reused) {
					return
				}
			}
		})
	}
}

// tryDoTxTwice is one try of a TestDoTxTwiceInOneTransaction case; it
// reports false when the first call lost its lease and try is below 3.
func tryDoTxTwice(t *testing.T, p *pgxpool.Pool, try int, group bool, lease, pause time.Duration, request orderReq, reused bool) bool {
	t.Helper()
	table := ordersTable(t, p)
	var opts []pgstore.Option
	if group {
		opts = append(opts, pgstore.WithGroupCommit(0))
	}
	// MaxWait is far longer than any answer the second call
	// should need: waiting it out is the failure.
	rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(lease), runtime.WithMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(fmt.Sprintf("%s#%d", t.Name(), try))
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	var first, second order
	var firstErr, secondErr error
	var took time.Duration
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if first, firstErr = pgstore.DoTx(ctx, rt, tx, call); firstErr != nil {
			return firstErr
		}
		time.Sleep(pause)
		again := call
		again.Request = request
		start := time.Now()
		second, secondErr = pgstore.DoTx(ctx, rt, tx, again)
		took = time.Since(start)
		return nil
	})
	// Stopped inside a statement, the effect's ended context made pgx
	// close the connection: ErrRollbackRequired, the same lease rule.
	if (errors.Is(firstErr, runtime.ErrLeaseLost) || errors.Is(firstErr, pgstore.ErrRollbackRequired)) && try < 3 {
		t.Logf("try %d: the first call lost its %v lease: %v; trying again", try, lease, firstErr)
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second call: %+v, %v after %v", second, secondErr, took)
	switch {
	case reused && !errors.Is(secondErr, runtime.ErrKeyReused):
		t.Errorf("second call with another request: %+v, %v; want ErrKeyReused", second, secondErr)
	case !reused && (secondErr != nil || second != first):
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
	return true
}
