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

// Regression tests for DoTx schedules that once ran a local effect twice or
// hung (issue 9, bugs 4, 5, 9 and 10).

// TestDoTxRollbackSurvivesDoneContext: the effect fails after the caller's
// context is done. The savepoint must still be rolled back, so that a
// caller who commits anyway commits neither the effect's rows nor a claim.
func TestDoTxRollbackSurvivesDoneContext(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(scopedCtx(t.Name()))
	var runs atomic.Int32
	tx, err := p.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if _, err := insertOrder(table, &runs)(ctx, tx, r); err != nil {
				return order{}, err
			}
			cancel() // the client went away while the effect ran
			return order{}, errors.New("the effect gave up")
		}})
	if err == nil {
		t.Fatal("DoTx succeeded")
	}
	// The caller ignores the error and commits.
	if err := tx.Commit(context.Background()); err != nil {
		t.Logf("commit: %v", err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 0 {
		t.Fatalf("%d effect rows committed after a failed effect", n)
	}
	if n := count(t, p, "SELECT count(*) FROM idem_records WHERE scope = $1", runtime.ScopeFrom(ctx)); n != 0 {
		t.Fatalf("%d claims committed after a failed effect", n)
	}
}

// TestDoTxLongTransactionKeepsItsRecord: a transaction that began longer
// ago than the TTL must not commit an already-expired SUCCESS record (the
// transaction's now() is its start), or the next duplicate runs again.
func TestDoTxLongTransactionKeepsItsRecord(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	c := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: insertOrder(table, &runs), TTL: time.Second}
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_sleep(1.3)"); err != nil { // the transaction is older than the TTL
			return err
		}
		_, err := pgstore.DoTx(ctx, rt, tx, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { _, err := pgstore.DoTx(ctx, rt, tx, c); return err }); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the local effect ran %d times, want 1 (the first record was committed expired)", n)
	}
}

// TestDoTxFailureRecordedWhileCallerHoldsLocks: the effect fails
// permanently while the caller's transaction holds a lock that a
// duplicate's effect would wait for, and the duplicate waits for the call.
// Recording the failure must not wait for the caller's transaction (nor the
// duplicate), and the duplicate must replay the failure, never run.
func TestDoTxFailureRecordedWhileCallerHoldsLocks(t *testing.T) {
	p := testPool(t)
	w := &claimWatch{}
	dupPool := watchedPool(t, w)
	table := ordersTable(t, p)
	if _, err := p.Exec(context.Background(), "INSERT INTO "+table+" (ref, amount) VALUES ('stock', 1)"); err != nil {
		t.Fatal(err)
	}
	callerRT, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(300*time.Millisecond), runtime.WithCompletionTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	dupRT, err := runtime.New(pgstore.New(dupPool), runtime.WithMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	lockStock := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET amount = amount + 1 WHERE ref = 'stock'")
		return err
	}
	reserve := func(effect func(context.Context, pgx.Tx, orderReq) (order, error)) pgstore.TxCall[orderReq, order] {
		return pgstore.TxCall[orderReq, order]{Operation: "Orders.Reserve", Key: "r-1", Request: orderReq{"r-1", 1}, Effect: effect}
	}
	callerTx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = callerTx.Rollback(context.Background()) }()
	if err := lockStock(ctx, callerTx); err != nil {
		t.Fatal(err)
	}
	var dupRan atomic.Bool
	dupDone := make(chan error, 1)
	callerDone := make(chan error, 1)
	go func() {
		_, err := pgstore.DoTx(ctx, callerRT, callerTx, reserve(func(context.Context, pgx.Tx, orderReq) (order, error) {
			go func() {
				dupDone <- pgx.BeginFunc(ctx, dupPool, func(tx pgx.Tx) error {
					_, err := pgstore.DoTx(ctx, dupRT, tx, reserve(func(ctx context.Context, tx pgx.Tx, _ orderReq) (order, error) {
						dupRan.Store(true)
						return order{}, lockStock(ctx, tx) // would wait for the caller's lock
					}))
					return err
				})
			}()
			w.waitingOrDone(t, p) // the duplicate has claimed (and waits) or waits on a lock
			return order{}, runtime.Permanent(errors.New("out of stock"))
		}))
		callerDone <- err
	}()
	select {
	case err := <-callerDone:
		if !errors.Is(err, runtime.ErrPermanent) {
			t.Fatalf("DoTx: %v, want the permanent failure", err)
		}
	case <-time.After(8 * time.Second):
		_ = callerTx.Rollback(context.Background()) // break the cycle so the test can end
		t.Fatal("DoTx hung recording the permanent failure while a duplicate waited")
	}
	var err2 error
	select {
	case err2 = <-dupDone: // the caller's transaction is still open
	case <-time.After(10 * time.Second):
		t.Fatal("the duplicate did not answer while the caller's transaction was open")
	}
	var fe *runtime.FailedError
	if !errors.As(err2, &fe) || fe.Message != "out of stock" {
		t.Errorf("duplicate: %v, want the failure replayed", err2)
	}
	if dupRan.Load() {
		t.Error("the duplicate ran the effect")
	}
}

// TestReplaysTakeNoLock: a replay of a finished record inside a caller's
// open transaction must not lock the record: other replays, in DoTx and
// in Do, answer at once.
func TestReplaysTakeNoLock(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	c := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { _, err := pgstore.DoTx(ctx, rt, tx, c); return err }); err != nil {
		t.Fatal(err)
	}
	// A replay in a transaction that stays open.
	open, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(context.Background()) }()
	first, err := pgstore.DoTx(ctx, rt, open, c)
	if err != nil {
		t.Fatal(err)
	}
	// Another DoTx replay while it is open.
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		got, err := pgstore.DoTx(ctx, rt, tx, c)
		if err == nil && got != first {
			err = errors.New("replayed another response")
		}
		return err
	}); err != nil {
		t.Fatalf("DoTx replay while another replay's transaction is open: %v", err)
	}
	// A plain Do replay of the same record.
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, err := runtime.Do(dctx, rt, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: func(context.Context, orderReq) (order, error) { return order{}, errors.New("must not run") }})
	if err != nil || got != first {
		t.Fatalf("Do replay while a DoTx replay's transaction is open: %+v, %v", got, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the effect ran %d times", runs.Load())
	}
}
