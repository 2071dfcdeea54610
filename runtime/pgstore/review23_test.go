package pgstore_test

// Review r23 (DoTx): code of the caller's that DoTx runs between its steps.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	goruntime "runtime"
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

// r23Tx is a caller's wrapper of its pgx.Tx (tracing, statement checks in
// a test) whose QueryRow or Begin misbehaves once: it panics, or calls
// runtime.Goexit (t.FailNow in a test's wrapper).
type r23Tx struct {
	pgx.Tx
	on  string // "QueryRow" or "Begin"
	how string // "panic" or "goexit"
	hit atomic.Bool
}

func (w *r23Tx) fire(method string) {
	if w.on != method || !w.hit.CompareAndSwap(false, true) {
		return
	}
	if w.how == "goexit" {
		goruntime.Goexit()
	}
	panic("r23Tx." + method)
}

func (w *r23Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	w.fire("QueryRow")
	return w.Tx.QueryRow(ctx, sql, args...)
}

func (w *r23Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	sp, err := w.Tx.Begin(ctx)
	w.fire("Begin") // after the savepoint exists, as a tracer's end hook would
	return sp, err
}

// TestR23DoTxCallerTxPanicsInBegin: row 25.27 ("a call that leaves before
// its outcome is recorded stops its renewals ...; DoTx rolls back its
// savepoint and releases its claim"). DoTx's Local.Begin runs statements
// on the caller's pgx.Tx (the transaction's ID, the savepoint) after the
// claim is granted and its heartbeat started, and before executeLocal
// installs its way out. A caller's Tx wrapper that panics or Goexits there
// leaves the heartbeat running: the claim's lease is renewed for as long
// as the process lives, after the caller recovered and rolled back; a
// duplicate in another transaction is told ErrInProgress for good.
func TestR23DoTxCallerTxPanicsInBegin(t *testing.T) {
	for _, tc := range []struct{ on, how string }{
		{"QueryRow", "panic"}, {"QueryRow", "goexit"}, {"Begin", "panic"},
	} {
		t.Run(tc.on+"/"+tc.how, func(t *testing.T) {
			p := testPool(t)
			const lease = 600 * time.Millisecond
			rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := pgstore.TxCall[string, int]{Operation: "R23.TxBegin", Key: "k1", Request: "req",
				Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
					runs.Add(1)
					return 1, nil
				}}
			how, v := r22RunG(func() {
				tx, err := p.Begin(ctx)
				if err != nil {
					panic(err)
				}
				defer func() { _ = tx.Rollback(context.Background()) }() // the caller recovers and rolls back
				_, _ = pgstore.DoTx(ctx, rt, &r23Tx{Tx: tx, on: tc.on, how: tc.how}, call)
			})
			t.Logf("first call: %s (%v)", how, v)
			id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key}
			first, st1 := r22RawLease(t, p, id)
			time.Sleep(4 * lease)
			later, st2 := r22RawLease(t, p, id)
			t.Logf("stored lease %v (%s), %v later %v (%s)", first.Format("15:04:05.000"), st1, 4*lease, later.Format("15:04:05.000"), st2)
			if st2 == "PROCESSING" && later.After(first) {
				t.Errorf("the claim's lease was renewed %v after the call was gone (stored expiry %v then %v)",
					4*lease, first.Format("15:04:05.000"), later.Format("15:04:05.000"))
			}
			var dupErr error
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, dupErr = pgstore.DoTx(ctx, rt, tx, call)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("duplicate %v later: %v (effect runs %d)", 4*lease, dupErr, runs.Load())
			if errors.Is(dupErr, runtime.ErrInProgress) {
				t.Errorf("duplicate %v after the call was gone: %v", 4*lease, dupErr)
			}
		})
	}
}

// TestR23DoTxObserverGoexitOnClaimed: the same promise, through the
// observer: one that calls runtime.Goexit on EventClaimed (observe()
// recovers panics only) leaves DoTx's claim PROCESSING with a live lease,
// neither released nor named to a transaction: a duplicate in another
// transaction is told ErrInProgress for the rest of the lease.
func TestR23DoTxObserverGoexitOnClaimed(t *testing.T) {
	p := testPool(t)
	const lease = 3 * time.Second
	var armed atomic.Bool
	armed.Store(true)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(0),
		runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
			if e.Kind == runtime.EventClaimed && armed.CompareAndSwap(true, false) {
				goruntime.Goexit()
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	call := pgstore.TxCall[string, int]{Operation: "R23.TxObs", Key: "k1", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) { return 1, nil }}
	how, v := r22RunG(func() {
		_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
	})
	t.Logf("first call: %s (%v)", how, v)
	var dupErr error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, dupErr = pgstore.DoTx(ctx, rt, tx, call)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("duplicate: %v", dupErr)
	if errors.Is(dupErr, runtime.ErrInProgress) {
		t.Errorf("duplicate after the call was gone (Goexit in the observer on EventClaimed): %v; the claim was not released", dupErr)
	}
}

// TestR23DoTxPanicNilUnderGodebug: README's DoTx table ("fails otherwise,
// or panics: released", its writes rolled back to the savepoint). Under
// GODEBUG=panicnil=1 an effect that panics with nil after one of its two
// writes is recorded SUCCESS: DoTx returns (zero, nil), its half-done
// write commits with the caller's transaction and duplicates replay a
// success. Run in a child process with the setting.
func TestR23DoTxPanicNilUnderGodebug(t *testing.T) {
	if os.Getenv("R23_CHILD") == "1" {
		p := testPool(t)
		ledger := r22Ledger(t, p)
		rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := scopedCtx(t.Name())
		var doErr error
		// DoTx re-raises the effect's panic (no WithRecoverPanics):
		// recovered here, as nil, so that the test goes on to look.
		func() {
			defer func() { recover() }()
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, doErr = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[string, int]{Operation: "R23.TxPanicNil", Key: "k1", Request: "req",
					Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
						if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ('debit')"); err != nil {
							return 0, err
						}
						panic(nil) // before the credit
					}})
				return doErr
			})
		}()
		rows := count(t, p, "SELECT count(*) FROM "+ledger)
		rec, gerr := rt.Store().Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R23.TxPanicNil", Key: "k1"})
		t.Logf("DoTx: %v; commit: %v; committed rows %d; record %s (%v)", doErr, err, rows, rec.State, gerr)
		if rows > 0 || rec.State == runtime.StateSuccess {
			t.Errorf("an effect that panicked (with nil) half way: %d of its writes committed, record %s", rows, rec.State)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestR23DoTxPanicNilUnderGodebug$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "R23_CHILD=1", "GODEBUG=panicnil=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Errorf("under GODEBUG=panicnil=1: %v", err)
	}
}

// r23Gate holds the first UNKNOWN transition (a leaving call's way out)
// until proceed is closed.
type r23Gate struct {
	runtime.Store
	once      atomic.Bool
	abandoned chan struct{}
	proceed   chan struct{}
}

func (g *r23Gate) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if p.To == runtime.StateUnknown && p.From == runtime.StateProcessing && g.once.CompareAndSwap(false, true) {
		close(g.abandoned)
		<-g.proceed
	}
	return g.Store.Transition(ctx, p)
}

// TestR23AbandonRacesTakeover: the brief: the lease expires and another
// worker takes over WHILE the leaving call records UNKNOWN; its CAS must
// not overwrite the new owner's record. Worker A's effect Goexits with its
// caller's context cancelled; its way-out write (UNKNOWN) is held past the
// lease; worker B takes over, runs the effect and records SUCCESS; then A's
// write goes through. On pgstore with group commit.
func TestR23AbandonRacesTakeover(t *testing.T) {
	p := testPool(t)
	const lease = 300 * time.Millisecond
	g := &r23Gate{Store: pgstore.New(p, pgstore.WithGroupCommit(0)), abandoned: make(chan struct{}), proceed: make(chan struct{})}
	rtA, err := runtime.New(g, runtime.WithLease(lease), runtime.WithMaxWait(0), runtime.WithOwner("A"))
	if err != nil {
		t.Fatal(err)
	}
	rtB, err := runtime.New(g, runtime.WithLease(lease), runtime.WithMaxWait(0), runtime.WithOwner("B"))
	if err != nil {
		t.Fatal(err)
	}
	base := scopedCtx(t.Name())
	id := runtime.Identity{Scope: runtime.ScopeFrom(base), Operation: "R23.AbandonRace", Key: "k1"}
	call := func(n int, exit bool, cancel func()) runtime.Call[string, int] {
		return runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
			Effect: func(ctx context.Context, _ string) (int, error) {
				if exit {
					cancel()
					goruntime.Goexit()
				}
				return n, nil
			}}
	}
	ctxA, cancelA := context.WithCancel(base)
	doneA := make(chan string)
	go func() {
		how, _ := r22RunG(func() { _, _ = runtime.Do(ctxA, rtA, call(1, true, cancelA)) })
		doneA <- how
	}()
	<-g.abandoned
	time.Sleep(lease + 100*time.Millisecond)
	respB, errB := runtime.Do(base, rtB, call(2, false, nil))
	t.Logf("B: %v, %v", respB, errB)
	close(g.proceed)
	t.Logf("A: %s", <-doneA)
	rec, err := g.Get(base, id)
	if err != nil {
		t.Fatal(err)
	}
	dup, dupErr := runtime.Do(base, rtB, call(3, false, nil))
	t.Logf("record %s owner %q response %s; duplicate %v, %v", rec.State, rec.Owner, rec.Response, dup, dupErr)
	if errB == nil && (rec.State != runtime.StateSuccess || dup != 2) {
		t.Errorf("A's way-out write overwrote B's SUCCESS: record %s, duplicate %v %v", rec.State, dup, dupErr)
	}
}

// r23WrapErr is an error wrapper; a nil *r23WrapErr panics in Error and
// Unwrap (a typed nil error from a downstream client).
type r23WrapErr struct{ inner error }

func (e *r23WrapErr) Error() string { return "wrapped: " + e.inner.Error() }
func (e *r23WrapErr) Unwrap() error { return e.inner }

// TestR23DoTxEffectErrorUnwrapPanics: row 25.27 ("the error's methods ...
// are called under recover"). Do classifies an effect's error under
// recover (an error whose methods panic is UNKNOWN). DoTx's failure path
// asks errors.Is(err, ErrPermanent) bare (local.go), after it has rolled
// back its savepoint and marked the call finished: a typed-nil error whose
// Unwrap panics makes DoTx panic through, the claim neither released nor
// recorded (PROCESSING, naming the caller's transaction, until that ends).
func TestR23DoTxEffectErrorUnwrapPanics(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	call := pgstore.TxCall[string, int]{Operation: "R23.TxUnwrap", Key: "k1", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
			var e *r23WrapErr
			return 0, e
		}}
	var doErr error
	var stateInTx string
	how, v := r22RunG(func() {
		_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			defer func() {
				// What the caller's transaction holds when DoTx is done.
				_, stateInTx = r22RawLease(t, p, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key})
			}()
			_, doErr = pgstore.DoTx(ctx, rt, tx, call)
			return nil
		})
	})
	t.Logf("DoTx %s (%v), err %v; record when it ended: %q", how, v, doErr, stateInTx)
	if how != "returned" {
		t.Errorf("DoTx %s (%v) on an effect error whose Unwrap panics; the record was %q when it left", how, v, stateInTx)
	}
}

// r23Tracer is a caller's pgx.QueryTracer (tracing, SQL checks in a test)
// that panics once on a statement containing match.
type r23Tracer struct {
	match string
	hit   atomic.Bool
}

func (tr *r23Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, tr.match) && tr.hit.CompareAndSwap(false, true) {
		panic("r23Tracer: " + tr.match)
	}
	return ctx
}
func (tr *r23Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestR23DoTxTracerPanicsInBegin: F5 with no wrapper: the caller's pool has
// a QueryTracer (code of the caller's, on the caller's connection) that
// panics on DoTx's statement asking the transaction's ID. The claim's
// heartbeat is never stopped.
func TestR23DoTxTracerPanicsInBegin(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &r23Tracer{match: "pg_current_xact_id"}
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 4
	callerPool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer callerPool.Close()
	p := testPool(t) // the store's own pool
	const lease = 600 * time.Millisecond
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	call := pgstore.TxCall[string, int]{Operation: "R23.TxTracer", Key: "k1", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) { return 1, nil }}
	how, v := r22RunG(func() {
		_ = pgx.BeginFunc(ctx, callerPool, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
	})
	t.Logf("first call: %s (%v)", how, v)
	id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key}
	first, _ := r22RawLease(t, p, id)
	time.Sleep(4 * lease)
	later, st := r22RawLease(t, p, id)
	if st == "PROCESSING" && later.After(first) {
		t.Errorf("the claim's lease was renewed %v after the call was gone (stored expiry %v then %v)",
			4*lease, first.Format("15:04:05.000"), later.Format("15:04:05.000"))
	}
}
