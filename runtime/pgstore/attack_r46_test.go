// Review r46: DoTx outcomes and sentinels.

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

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// DoTx releases the claim of an effect whose error is a timeout, marked
// Permanent or not ("any other error, a timeout included (marked Permanent
// or not), releases the claim (nothing happened), so a retry runs the
// effect again"). The caller of that attempt must then not be told a
// permanent failure (errors.Is(err, ErrPermanent)): the retry's effect
// happens.
func TestR46DoTxPermanentTimeoutReleasedNotToldPermanent(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
		Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if runs.Load() == 0 {
				runs.Add(1)
				return order{}, runtime.Permanent(fmt.Errorf("inventory service: %w", context.DeadlineExceeded))
			}
			return insertOrder(table, &runs)(ectx, tx, r)
		}}
	do := func() (order, error) {
		var o order
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var err error
			o, err = pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
		return o, err
	}
	_, first := do()
	o, second := do()
	t.Logf("first: %v; second: %+v %v; runs %d", first, o, second, runs.Load())
	if second != nil || count(t, p, "SELECT count(*) FROM "+table) != 1 {
		t.Fatalf("second: %v", second)
	}
	if errors.Is(first, runtime.ErrPermanent) {
		t.Errorf("the first caller was told a permanent failure (errors.Is(err, ErrPermanent)) for a key whose effect then happened: %v", first)
	}
}

// WithCompletionTimeout "bounds the recording of an outcome after the
// effect returned", on PostgreSQL: another session holds the record's row
// lock while the effect fails permanently; the FAILED write waits on it.
func TestR46PGCompletionTimeoutBoundsRecording(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithCompletionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var side pgx.Tx
	var returned time.Time
	_, derr := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
		Effect: func(context.Context, string) (string, error) {
			var err error
			side, err = p.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := side.Exec(context.Background(), "SELECT 1 FROM idem_records WHERE scope=$1 FOR UPDATE", runtime.ScopeFrom(ctx)); err != nil {
				t.Fatal(err)
			}
			returned = time.Now()
			return "", runtime.Permanent(errors.New("declined"))
		}})
	took := time.Since(returned)
	_ = side.Rollback(context.Background())
	t.Logf("recording took %v: %v", took, derr)
	if took > 2500*time.Millisecond || errors.Is(derr, runtime.ErrPermanent) {
		t.Errorf("recording took %v (bound 1s); err %v", took, derr)
	}
}

// README, Errors: "ErrKeyReused | the key was used with another request
// payload (also while in flight)"; DoTx table: a claim left by a
// transaction that rolled back, called "with another request:
// ErrKeyReused, as for any claim in flight; the key stays bound to the
// first request until a retry with it takes the claim over". The same key
// with another request inside the same transaction, after a savepoint
// around the first call rolled back (its claim void, as after a
// rollback): the key is bound to the first request, so ErrKeyReused.
func TestR46DoTxSavepointOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	t.Run("savepoint", func(t *testing.T) {
		r46SavepointOtherPayload(t, p, rt, table, &runs)
	})
}

// Observation of r46 (the README then said "A DoTx called from inside its
// own effect with the same identity is told ErrInProgress at once"): from
// inside the first call's effect, the same key with another request was
// ErrInProgress, where runtime.Do answers ErrKeyReused for another payload
// in flight. It is ErrKeyReused now, as documented since.
func TestR46DoTxReentrantOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	t.Run("reentrant", func(t *testing.T) {
		ctx := scopedCtx(t.Name())
		var inner error
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
				Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					_, inner = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 999},
						Effect: insertOrder(table, &runs)})
					return insertOrder(table, &runs)(ectx, tx, r)
				}})
			return err
		})
		t.Logf("outer %v; inner %v", err, inner)
		if !errors.Is(inner, runtime.ErrKeyReused) {
			t.Errorf("the same key with another request, in flight in this transaction: %v; want ErrKeyReused", inner)
		}
	})
}

func r46SavepointOtherPayload(t *testing.T, p *pgxpool.Pool, rt *runtime.Runtime, table string, runs *atomic.Int32) {
	{
		ctx := scopedCtx(t.Name())
		var second error
		var o order
		_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { // a savepoint around the first call
				_, err := pgstore.DoTx(ctx, rt, sp, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-2", Request: orderReq{"o-2", 5},
					Effect: insertOrder(table, runs)})
				if err != nil {
					t.Fatal(err)
				}
				return errors.New("roll the savepoint back")
			})
			o, second = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-2", Request: orderReq{"o-2", 999},
				Effect: insertOrder(table, runs)})
			return second
		})
		t.Logf("second: %+v %v", o, second)
		if !errors.Is(second, runtime.ErrKeyReused) {
			t.Errorf("the same key with another request after the savepoint rolled back: %+v, %v; want ErrKeyReused (the key stays bound to the first request)", o, second)
		}
	}
}

// The same key twice in one transaction, the first call's SUCCESS held by
// the transaction (not yet committed): the second call with another
// request must be ErrKeyReused, not the first call's replay.
func TestR46DoTxSameTxReplayOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	ctx := scopedCtx(t.Name())
	var second error
	var o order
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-3", Request: orderReq{"o-3", 5},
			Effect: insertOrder(table, &runs)}); err != nil {
			t.Fatal(err)
		}
		o, second = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-3", Request: orderReq{"o-3", 999},
			Effect: insertOrder(table, &runs)})
		return nil
	})
	t.Logf("second: %+v %v (runs %d)", o, second, runs.Load())
	if !errors.Is(second, runtime.ErrKeyReused) {
		t.Errorf("second call with another request: %+v %v; want ErrKeyReused", o, second)
	}
}

// A void claim of an ended transaction (a savepoint around DoTx rolled
// back, then the transaction committed), met by the next transaction on
// the same connection with another request: "with another request:
// ErrKeyReused, as for any claim in flight; the key stays bound to the
// first request" (README, Local effects table).
func TestR46DoTxVoidClaimNextTxSameConnOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // every transaction on one connection
	txPool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer txPool.Close()
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	ctx := scopedCtx(t.Name())
	_ = pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error {
		_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			if _, err := pgstore.DoTx(ctx, rt, sp, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-4", Request: orderReq{"o-4", 5},
				Effect: insertOrder(table, &runs)}); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll the savepoint back")
		})
		return nil // commit: the claim is void
	})
	var o order
	var second error
	_ = pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error {
		o, second = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-4", Request: orderReq{"o-4", 999},
			Effect: insertOrder(table, &runs)})
		return second
	})
	t.Logf("second: %+v %v", o, second)
	if !errors.Is(second, runtime.ErrKeyReused) {
		t.Errorf("void claim of an ended transaction, another request: %+v %v; want ErrKeyReused", o, second)
	}
}
