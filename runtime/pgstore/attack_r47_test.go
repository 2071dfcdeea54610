// Review r47: DoTx key binding.

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

func r47Call(table string, runs *atomic.Int32, key string, amount int) pgstore.TxCall[orderReq, order] {
	return pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: key, Request: orderReq{key, amount},
		Effect: insertOrder(table, runs)}
}

func r47DoCall(key string, amount int, ran *atomic.Int32) runtime.Call[orderReq, order] {
	return runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: key, Request: orderReq{key, amount},
		Effect: func(context.Context, orderReq) (order, error) { ran.Add(1); return order{Ref: "other"}, nil }}
}

// The first call's SUCCESS is held by an open transaction past the lease;
// another request with the key, through runtime.Do and through DoTx in
// another transaction: ErrKeyReused (README, Errors: "the key was used
// with another request payload (also while in flight)"), then the first
// transaction rolls back and the key "stays bound to the first request".
func TestR47DoTxHeldSuccessPastLeaseOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(time.Second), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs, otherRuns atomic.Int32
	ctx := scopedCtx(t.Name())
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.DoTx(ctx, rt, tx, r47Call(table, &runs, "o-1", 5)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the lease has run out; the row is locked by the SUCCESS write
	_, e1 := runtime.Do(ctx, rt, r47DoCall("o-1", 999, &otherRuns))
	var e2 error
	_ = pgx.BeginFunc(ctx, p, func(tx2 pgx.Tx) error {
		_, e2 = pgstore.DoTx(ctx, rt, tx2, r47Call(table, &otherRuns, "o-1", 999))
		return e2
	})
	_ = tx.Rollback(ctx)
	_, e3 := runtime.Do(ctx, rt, r47DoCall("o-1", 999, &otherRuns))
	var e4 error
	_ = pgx.BeginFunc(ctx, p, func(tx2 pgx.Tx) error {
		_, e4 = pgstore.DoTx(ctx, rt, tx2, r47Call(table, &otherRuns, "o-1", 999))
		return e4
	})
	t.Logf("held: Do %v; DoTx %v\nafter rollback: Do %v; DoTx %v; other runs %d", e1, e2, e3, e4, otherRuns.Load())
	for i, e := range []error{e1, e2, e3, e4} {
		if !errors.Is(e, runtime.ErrKeyReused) {
			t.Errorf("call %d with another request: %v; want ErrKeyReused", i+1, e)
		}
	}
	if otherRuns.Load() != 0 {
		t.Errorf("the effect ran %d times for another request while the key was bound", otherRuns.Load())
	}
}

// A savepoint around the first call rolled back; the transaction is still
// open: from another connection, another request is ErrKeyReused (the
// claim names an open transaction, with a live lease).
func TestR47DoTxSavepointOtherConnOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs, otherRuns atomic.Int32
	ctx := scopedCtx(t.Name())
	var e1, e2 error
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			if _, err := pgstore.DoTx(ctx, rt, sp, r47Call(table, &runs, "o-2", 5)); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll the savepoint back")
		})
		_, e1 = runtime.Do(ctx, rt, r47DoCall("o-2", 999, &otherRuns))
		_ = pgx.BeginFunc(ctx, p, func(tx2 pgx.Tx) error {
			_, e2 = pgstore.DoTx(ctx, rt, tx2, r47Call(table, &otherRuns, "o-2", 999))
			return e2
		})
		return nil
	})
	t.Logf("Do %v; DoTx %v; other runs %d", e1, e2, otherRuns.Load())
	for i, e := range []error{e1, e2} {
		if !errors.Is(e, runtime.ErrKeyReused) {
			t.Errorf("call %d with another request: %v; want ErrKeyReused", i+1, e)
		}
	}
}

// Savepoint rolled back, then the same request re-run in the same
// transaction (documented: "the second call releases the first call's
// claim ... and runs the effect again at once"), then another request in
// the same transaction, and after the whole transaction rolled back, on
// the same connection: ErrKeyReused each time.
func TestR47DoTxSavepointRerunThenOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	txPool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer txPool.Close()
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs, otherRuns atomic.Int32
	ctx := scopedCtx(t.Name())
	var rerun, e1, e2 error
	_ = pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error {
		_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			if _, err := pgstore.DoTx(ctx, rt, sp, r47Call(table, &runs, "o-3", 5)); err != nil {
				t.Fatal(err)
			}
			return errors.New("roll the savepoint back")
		})
		_, rerun = pgstore.DoTx(ctx, rt, tx, r47Call(table, &runs, "o-3", 5))
		_, e1 = pgstore.DoTx(ctx, rt, tx, r47Call(table, &otherRuns, "o-3", 999))
		return errors.New("roll back")
	})
	_ = pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error {
		_, e2 = pgstore.DoTx(ctx, rt, tx, r47Call(table, &otherRuns, "o-3", 999))
		return e2
	})
	t.Logf("rerun %v (runs %d); other in tx %v; other after rollback %v; other runs %d", rerun, runs.Load(), e1, e2, otherRuns.Load())
	if rerun != nil || runs.Load() != 2 {
		t.Errorf("the re-run: %v, runs %d", rerun, runs.Load())
	}
	for i, e := range []error{e1, e2} {
		if !errors.Is(e, runtime.ErrKeyReused) {
			t.Errorf("call %d with another request: %v; want ErrKeyReused", i+1, e)
		}
	}
}

// From inside the first call's effect, runtime.Do through the pool with
// the same key and another request: ErrKeyReused at once.
func TestR47DoTxEffectDoOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs, otherRuns atomic.Int32
	ctx := scopedCtx(t.Name())
	var inner error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		c := r47Call(table, &runs, "o-4", 5)
		eff := c.Effect
		c.Effect = func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			_, inner = runtime.Do(ctx, rt, r47DoCall("o-4", 999, &otherRuns))
			return eff(ectx, tx, r)
		}
		_, err := pgstore.DoTx(ctx, rt, tx, c)
		return err
	})
	t.Logf("outer %v; inner %v", err, inner)
	if !errors.Is(inner, runtime.ErrKeyReused) || otherRuns.Load() != 0 {
		t.Errorf("inner: %v, other runs %d; want ErrKeyReused", inner, otherRuns.Load())
	}
}

// First call FAILED (committed on its own), then a savepoint around it
// rolled back: another request is ErrKeyReused, the same one replays.
func TestR47DoTxFailedSavepointOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var otherRuns atomic.Int32
	ctx := scopedCtx(t.Name())
	var same, other error
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_ = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, sp, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-5", Request: orderReq{"o-5", 5},
				Effect: func(context.Context, pgx.Tx, orderReq) (order, error) {
					return order{}, runtime.Permanent(fmt.Errorf("declined"))
				}})
			return err
		})
		_, same = pgstore.DoTx(ctx, rt, tx, r47Call(table, &otherRuns, "o-5", 5))
		_, other = pgstore.DoTx(ctx, rt, tx, r47Call(table, &otherRuns, "o-5", 999))
		return nil
	})
	t.Logf("same %v; other %v; runs %d", same, other, otherRuns.Load())
	if !errors.Is(same, runtime.ErrPermanent) || !errors.Is(other, runtime.ErrKeyReused) || otherRuns.Load() != 0 {
		t.Errorf("same %v; other %v; runs %d", same, other, otherRuns.Load())
	}
}

// README, state machine: a timeout anywhere in the error tree is "never
// FAILED, never a release" for runtime.Do, and for DoTx "fails otherwise
// (a timeout included, marked Permanent or not): released". The DoTx
// effect calls a remote operation through runtime.Do whose gateway timed
// out (a net.Error that timed out, marked Permanent by the gateway code):
// the remote record is UNKNOWN. The DoTx effect marks that error
// Permanent: a timeout is in its tree, yet DoTx records FAILED and every
// retry is told a permanent failure.
func TestR47DoTxNestedUnknownTimeoutRecordedFailed(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	timeout := &netTimeout{}
	remote := runtime.Call[string, string]{Operation: "Gateway.Charge", Key: "g-1", Request: "r",
		Effect: func(context.Context, string) (string, error) {
			return "", runtime.Permanent(fmt.Errorf("gateway: %w", timeout))
		}}
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-6", Request: orderReq{"o-6", 5},
		Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			if _, err := runtime.Do(ectx, rt, remote); err != nil {
				return order{}, runtime.Permanent(fmt.Errorf("charging: %w", err))
			}
			return insertOrder(table, &runs)(ectx, tx, r)
		}}
	do := func() error {
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
	}
	first := do()
	second := do()
	t.Logf("first: %v\nsecond: %v", first, second)
	if errors.Is(first, runtime.ErrPermanent) || errors.Is(second, runtime.ErrPermanent) {
		t.Errorf("a timeout in the tree was recorded FAILED by DoTx: first ErrPermanent=%v, retry ErrPermanent=%v",
			errors.Is(first, runtime.ErrPermanent), errors.Is(second, runtime.ErrPermanent))
	}
}

// netTimeout is a net.Error that timed out, matching no sentinel by Is.
type netTimeout struct{}

func (*netTimeout) Error() string   { return "read tcp 10.0.0.1:443: i/o timeout" }
func (*netTimeout) Timeout() bool   { return true }
func (*netTimeout) Temporary() bool { return true }

// README, Errors: "ErrTooLarge | request over the store's record limit (in
// DoTx also a response: the effect's writes are rolled back)" against
// Local effects: "A response or failure over the store's record limit is
// recorded shortened (the size rule: SUCCESS without its response,
// duplicates get ErrNotReplayable ...), never left PROCESSING". Observe
// which one holds.
func TestR47DoTxResponseTooLarge(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p, pgstore.WithMaxRecordBytes(4096)), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-7", Request: orderReq{"o-7", 5},
		Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			o, err := insertOrder(table, &runs)(ectx, tx, r)
			o.Ref = strings.Repeat("x", 10000)
			return o, err
		}}
	var o order
	first := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		o, err = pgstore.DoTx(ctx, rt, tx, call)
		return err
	})
	rows := count(t, p, "SELECT count(*) FROM "+table)
	second := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := pgstore.DoTx(ctx, rt, tx, call)
		return err
	})
	t.Logf("first: len %d, %v; rows %d; second: %v; runs %d", len(o.Ref), first, rows, second, runs.Load())
}

// "A DoTx called from inside its own effect with the same identity is told
// ErrInProgress at once" (MaxWait 5s: at once means well before it), and
// runtime.Do from inside the effect with the same request waits MaxWait.
func TestR47DoTxReentrantSameRequestAtOnce(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	ctx := scopedCtx(t.Name())
	var inner error
	var took time.Duration
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		c := r47Call(table, &runs, "o-8", 5)
		eff := c.Effect
		c.Effect = func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			start := time.Now()
			_, inner = pgstore.DoTx(ctx, rt, tx, r47Call(table, &runs, "o-8", 5))
			took = time.Since(start)
			return eff(ectx, tx, r)
		}
		_, err := pgstore.DoTx(ctx, rt, tx, c)
		return err
	})
	t.Logf("outer %v; inner %v after %v; runs %d", err, inner, took, runs.Load())
	if !errors.Is(inner, runtime.ErrInProgress) || took > 2*time.Second || runs.Load() != 1 {
		t.Errorf("inner %v after %v, runs %d", inner, took, runs.Load())
	}
}
