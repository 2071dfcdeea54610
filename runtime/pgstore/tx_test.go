package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
)

type orderReq struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

type order struct {
	ID     int64  `json:"id"`
	Ref    string `json:"ref"`
	Amount int    `json:"amount"`
}

// ordersTable creates a business table of its own for one test.
func ordersTable(t *testing.T, p *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("orders_%d", time.Now().UnixNano())
	if _, err := p.Exec(context.Background(), "CREATE TABLE "+name+" (id bigserial PRIMARY KEY, ref text NOT NULL, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE "+name) })
	return name
}

func insertOrder(table string, runs *atomic.Int32) func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
	return func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
		runs.Add(1)
		var o order
		err := tx.QueryRow(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2) RETURNING id, ref, amount", r.OrderID, r.Amount).
			Scan(&o.ID, &o.Ref, &o.Amount)
		return o, err
	}
}

func count(t *testing.T, p *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := p.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func scopedCtx(name string) context.Context {
	return runtime.WithScope(context.Background(), fmt.Sprintf("%s/%d", name, time.Now().UnixNano()))
}

func TestDoTxConcurrentDuplicatesOneRow(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	const n = 16
	var wg sync.WaitGroup
	results := make([]order, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				results[i], err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{
					Operation: "Orders.Create", Key: "order-42", Request: orderReq{"order-42", 990},
					Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
						o, err := insertOrder(table, &runs)(ctx, tx, r)
						time.Sleep(20 * time.Millisecond) // hold the transaction open a little
						return o, err
					},
				})
				return err
			})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if got := count(t, p, "SELECT count(*) FROM "+table); got != 1 {
		t.Fatalf("%d business rows for %d duplicates, want 1", got, n)
	}
	if r := runs.Load(); r != 1 {
		t.Fatalf("effect ran %d times, want 1", r)
	}
	for i := range n {
		if results[i] != results[0] {
			t.Errorf("caller %d got %+v, caller 0 got %+v", i, results[i], results[0])
		}
	}
}

func TestDoTxRollbackLeavesNothing(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	const lease = 300 * time.Millisecond
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	boom := errors.New("stock check failed")
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if _, err := insertOrder(table, &runs)(ctx, tx, r); err != nil {
				return order{}, err
			}
			return order{}, boom // after the write: it must be rolled back
		}}

	// The effect fails: its row is rolled back and the claim released, and
	// the caller's transaction is still usable.
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := pgstore.DoTx(ctx, rt, tx, call); !errors.Is(err, boom) {
			t.Errorf("DoTx error = %v, want the effect's error", err)
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		t.Fatalf("caller's transaction unusable after a failed effect: %v", err)
	}
	if got := count(t, p, "SELECT count(*) FROM "+table); got != 0 {
		t.Fatalf("%d business rows after the effect failed, want 0", got)
	}
	if got := count(t, p, "SELECT count(*) FROM idem_records WHERE scope = $1", runtime.ScopeFrom(ctx)); got != 0 {
		t.Fatalf("%d records after the effect failed, want 0", got)
	}

	// The caller rolls back its own transaction after a successful effect:
	// no row remains, and the claim stays PROCESSING until its lease
	// expires; then a retry runs the effect.
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-2",
			Request: orderReq{"o-2", 5}, Effect: insertOrder(table, &runs)}); err != nil {
			t.Error(err)
		}
		return errors.New("caller aborts")
	})
	rolledBack := time.Now()
	if got := count(t, p, "SELECT count(*) FROM "+table); got != 0 {
		t.Fatalf("%d business rows after the caller rolled back, want 0", got)
	}
	if got := count(t, p, "SELECT count(*) FROM idem_records WHERE scope = $1 AND state = 'PROCESSING'", runtime.ScopeFrom(ctx)); got != 1 {
		t.Fatalf("%d PROCESSING claims after the caller rolled back, want 1", got)
	}
	var o order
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		o, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-2",
			Request: orderReq{"o-2", 5}, Effect: insertOrder(table, &runs)})
		return err
	}); err != nil || o.Ref != "o-2" {
		t.Fatalf("retry after rollback: %+v, %v", o, err)
	}
	if waited := time.Since(rolledBack); waited > lease+2*time.Second {
		t.Errorf("the retry waited %v for a lease of %v", waited, lease)
	}
	if got := count(t, p, "SELECT count(*) FROM "+table); got != 1 {
		t.Fatalf("%d business rows after the retry, want 1", got)
	}
}

func TestDoTxPermanentFailureReplayed(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", -5},
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if _, err := insertOrder(table, &runs)(ctx, tx, r); err != nil {
				return order{}, err
			}
			return order{}, runtime.Permanent(errors.New("amount must be positive"))
		}}
	for i := range 2 {
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
		if !errors.Is(err, runtime.ErrPermanent) {
			t.Fatalf("call %d: error = %v, want a permanent failure", i, err)
		}
		var fe *runtime.FailedError
		if i == 1 && (!errors.As(err, &fe) || fe.Message != "amount must be positive") {
			t.Fatalf("replayed failure = %v", err)
		}
	}
	if runs.Load() != 1 || count(t, p, "SELECT count(*) FROM "+table) != 0 {
		t.Fatalf("runs %d, rows %d; want 1 run and no row", runs.Load(), count(t, p, "SELECT count(*) FROM "+table))
	}
	// Same key, another payload.
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1",
			Request: orderReq{"o-1", 6}, Effect: insertOrder(table, &runs)})
		return err
	})
	if !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("key reuse: %v", err)
	}
}

func TestDoTxDuplicateWaitIsBounded(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				return err
			}
			close(holding)
			<-release // the first transaction stays open
			return nil
		})
	}()
	<-holding
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := pgstore.DoTx(ctx, rt, tx, call)
		if !errors.Is(err, runtime.ErrInProgress) {
			t.Errorf("duplicate while the first transaction is open: %v, want ErrInProgress", err)
		}
		// The caller's transaction is still usable, and lock_timeout is restored.
		var lt string
		return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt)
	})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times", runs.Load())
	}
}

func TestDoTxNeedsPgStore(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.DoTx[orderReq, order](context.Background(), rt, nil, pgstore.TxCall[orderReq, order]{Operation: "O.C", Key: "k",
		Effect: func(context.Context, pgx.Tx, orderReq) (order, error) { return order{}, nil }})
	if err == nil {
		t.Fatal("DoTx on a memory store did not fail")
	}
}
