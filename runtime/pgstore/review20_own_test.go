package pgstore_test

// Review r20's findings 1 and 2 (reliability.md rows 25.22, 25.23): a
// second DoTx of one identity in a transaction that holds only the first
// call's claim (a savepoint rolled back around it) or that runs inside the
// first call's effect never waits for its own transaction.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime/pgstore"
)

// TestR20SavepointRolledBackThenSecondCall: the caller takes a savepoint,
// calls DoTx (SUCCESS written inside the savepoint), rolls back to the
// savepoint (the effect's row and the SUCCESS write are gone; the committed
// claim still names this transaction, its lease live), and calls DoTx again
// with the same request. Nobody else holds the key: the only call "in
// flight" is the caller's own transaction, which holds no outcome. The
// second call must not wait for its own transaction.
func TestR20SavepointRolledBackThenSecondCall(t *testing.T) {
	for _, tc := range []struct {
		order   int
		maxWait time.Duration
	}{{0, r20MaxWait}, {1, r20MaxWait}, {-1, r20MaxWait}, {0, 10 * time.Second}} {
		order := tc.order
		t.Run(fmt.Sprintf("order%d/maxWait%v", order, tc.maxWait), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt, s := r20RuntimeWait(t, tc.maxWait)
			pgstore.SetClaimOrder(s, order)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)

			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, "SAVEPOINT caller_sp"); err != nil {
				t.Fatal(err)
			}
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				t.Fatalf("first DoTx: %v", err)
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT caller_sp"); err != nil {
				t.Fatal(err)
			}
			var second error
			d := timed(func() { _, second = pgstore.DoTx(ctx, rt, tx, call) })
			t.Logf("second DoTx after the savepoint's rollback: %v after %v (runs %d)", second, d.Round(time.Millisecond), runs.Load())
			if second != nil {
				t.Errorf("second DoTx: %v after %v: the caller waited for its own transaction (it holds no outcome, nobody else holds the key)", second, d.Round(time.Millisecond))
			} else if d > r20Quick {
				t.Errorf("second DoTx took %v: it waited for its own transaction", d.Round(time.Millisecond))
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			if n := count(t, p, "SELECT count(*) FROM "+table); second == nil && n != 1 {
				t.Errorf("%d rows committed, want 1", n)
			}
		})
	}
}

// TestR20Reentrant: the effect of a DoTx call calls DoTx again with the same
// identity on the effect's transaction (a handler that calls itself). The
// inner call's "call in flight" is its own caller: waiting MaxWait for it
// is waiting for its own transaction.
func TestR20Reentrant(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs, innerRuns atomic.Int32
	inner := r20Call(table, "k1", &innerRuns, 10)
	var innerErr error
	var innerDur time.Duration
	outer := r20Call(table, "k1", &runs, 10)
	outer.Effect = func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
		o, err := insertOrder(table, &runs)(ctx, tx, r)
		if err != nil {
			return o, err
		}
		innerDur = timed(func() { _, innerErr = pgstore.DoTx(ctx, rt, tx, inner) })
		return o, nil
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	_, outerErr := pgstore.DoTx(ctx, rt, tx, outer)
	t.Logf("inner: %v after %v (inner runs %d); outer: %v", innerErr, innerDur.Round(time.Millisecond), innerRuns.Load(), outerErr)
	if innerRuns.Load() != 0 {
		t.Errorf("the inner call ran the effect while the outer one is in flight")
	}
	if innerDur > r20Quick {
		t.Errorf("the reentrant call waited %v for its own transaction (%v)", innerDur.Round(time.Millisecond), innerErr)
	}
}

// TestR20SavepointErrorRecoveryRetry is finding 1 in the common batch
// pattern: each item runs in a savepoint; an item whose later statement
// fails is rolled back to its savepoint and retried. The retry's DoTx of
// the same identity waits for its own transaction (MaxWait, the default
// 2 s, then ErrInProgress), and so does every further retry while the
// first call's lease lasts (3 s here, 30 s by default).
func TestR20SavepointErrorRecoveryRetry(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "item-1", &runs, 10)
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var last error
	var took []time.Duration
	for attempt := range 2 {
		if _, err := tx.Exec(ctx, "SAVEPOINT item"); err != nil {
			t.Fatal(err)
		}
		var err error
		took = append(took, timed(func() { _, err = pgstore.DoTx(ctx, rt, tx, call) }))
		last = err
		if err != nil {
			t.Logf("attempt %d: DoTx: %v after %v", attempt, err, took[attempt].Round(time.Millisecond))
			_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT item")
			continue
		}
		if attempt == 0 {
			// the item's next statement fails the first time (a transient
			// violation): roll the item back and retry it.
			if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("1/0 succeeded")
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT item"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT item"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("attempts took %v; last error %v", took, last)
	if last != nil || took[1] > r20Quick {
		t.Errorf("the item's retry in the same transaction: %v after %v: it waited for its own transaction", last, took[1].Round(time.Millisecond))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
