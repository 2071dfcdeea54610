package pgstore_test

// Review r21 (a fresh review of DoTx's own-claim handling, public docs
// only): its tests, fixed or pinning a documented limit (reliability.md
// rows 25.22 to 25.25).

import (
	"context"
	"encoding/json"
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

// r21PanicNext makes the next encoding of an r21Order panic (a response
// type whose MarshalJSON panics on one value: a nil map, a nil pointer).
var r21PanicNext atomic.Bool

type r21Order struct {
	ID  int64  `json:"id"`
	Ref string `json:"ref"`
}

func (o r21Order) MarshalJSON() ([]byte, error) {
	if r21PanicNext.CompareAndSwap(true, false) {
		panic("r21: MarshalJSON panicked")
	}
	type plain r21Order
	return json.Marshal(plain(o))
}

func r21Call(table, key string, runs *atomic.Int32) pgstore.TxCall[orderReq, r21Order] {
	return pgstore.TxCall[orderReq, r21Order]{
		Operation: "R21.Create", Key: key,
		Request: orderReq{OrderID: key, Amount: 1},
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (r21Order, error) {
			runs.Add(1)
			var o r21Order
			err := tx.QueryRow(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2) RETURNING id, ref", r.OrderID, r.Amount).
				Scan(&o.ID, &o.Ref)
			return o, err
		},
	}
}

// r21Fixture is what most of these tests start from: the pool, an orders
// table, r20's runtime, a scoped context and the effect's run count.
type r21Fixture struct {
	p     *pgxpool.Pool
	table string
	rt    *runtime.Runtime
	ctx   context.Context
	runs  atomic.Int32
}

func newR21Fixture(t *testing.T) *r21Fixture {
	t.Helper()
	f := &r21Fixture{p: testPool(t), ctx: scopedCtx(t.Name())}
	f.table = ordersTable(t, f.p)
	f.rt, _ = r20Runtime(t)
	return f
}

// r21Recover runs f and returns the value of a panic in it.
func r21Recover(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// TestR21ResponsePanicThenRetryInTx: the response's encoding panics after
// the effect returned (after Begin, before Transition): DoTx neither rolls
// back its savepoint nor marks its call returned (Finish never runs). The
// caller recovers the panic, rolls back to its own savepoint around the
// call (a batch that retries an item, row 25.22) and calls DoTx again:
// the second call is not reentrant and its transaction holds no outcome,
// so it must run the effect (at once), not be told ErrInProgress "called
// from inside the effect".
func TestR21ResponsePanicThenRetryInTx(t *testing.T) {
	f := newR21Fixture(t)
	p, table, rt, ctx, runs := f.p, f.table, f.rt, f.ctx, &f.runs
	call := r21Call(table, "k1", runs)

	tx := r20Begin(ctx, t, p)
	if _, err := tx.Exec(ctx, "SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	r21PanicNext.Store(true)
	v := r21Recover(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) })
	r21PanicNext.Store(false)
	if v != nil {
		t.Errorf("the response's encoding panicked through DoTx: %v", v)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	var second error
	d := timed(func() { _, second = pgstore.DoTx(ctx, rt, tx, call) })
	t.Logf("second DoTx: %v after %v (runs %d)", second, d.Round(time.Millisecond), runs.Load())
	if second != nil {
		t.Errorf("second DoTx after the savepoint's rollback: %v (after %v): the transaction holds no outcome and no call of it is running", second, d.Round(time.Millisecond))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); second == nil && n != 1 {
		t.Errorf("%d rows committed, want 1", n)
	}
}

// TestR21ResponsePanicRecoveredCommit: the response's encoding panics
// after the effect returned; the caller recovers the panic and commits
// (no savepoint of its own: the "error recovered without a savepoint"
// pattern). An effect that panics is rolled back to DoTx's savepoint
// before the panic goes on (Finish(false)); a panic in the response's
// encoding is not, so the effect's row commits with the claim still
// PROCESSING, naming a transaction that has ended. A duplicate then takes
// it over at once and runs the effect again: two committed effects for one
// identity, no committed outcome.
func TestR21ResponsePanicRecoveredCommit(t *testing.T) {
	f := newR21Fixture(t)
	p, table, rt, ctx, runs := f.p, f.table, f.rt, f.ctx, &f.runs
	call := r21Call(table, "k1", runs)

	tx := r20Begin(ctx, t, p)
	r21PanicNext.Store(true)
	v := r21Recover(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) })
	r21PanicNext.Store(false)
	if v != nil {
		t.Errorf("the response's encoding panicked through DoTx: %v", v)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Logf("commit after the recovered panic: %v (nothing committed)", err)
	}
	tx2 := r20Begin(ctx, t, p)
	_, err := pgstore.DoTx(ctx, rt, tx2, call)
	if err != nil {
		t.Logf("duplicate: %v", err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
		t.Errorf("%d effect rows committed for one identity (effect ran %d times, 2 transactions committed), want 1", n, runs.Load())
	}
}

// r21NilConnTx is a caller's pgx.Tx wrapper (tracing, metrics) whose
// Conn() names no connection. DoTx accepts it (tx.go's txClaims.add
// says so).
type r21NilConnTx struct{ pgx.Tx }

func (r21NilConnTx) Conn() *pgx.Conn { return nil }

// TestR21NilConnSavepointRetry: row 25.22 with a wrapper whose Conn() is
// nil: DoTx cannot tell its transaction's claims (the documented limit),
// so the second call after the savepoint's rollback waits for the claim
// as for another transaction's: MaxWait, then ErrInProgress, the effect
// not run again.
func TestR21NilConnSavepointRetry(t *testing.T) {
	f := newR21Fixture(t)
	p, table, ctx, runs := f.p, f.table, f.ctx, &f.runs
	rt := r21UntrackedRuntime(t, p)
	call := r20Call(table, "k1", runs, 10)

	tx := r21NilConnTx{r20Begin(ctx, t, p)}
	if _, err := tx.Exec(ctx, "SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.DoTx(ctx, rt, pgx.Tx(tx), call); err != nil {
		t.Fatalf("first DoTx: %v", err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	var second error
	d := timed(func() { _, second = pgstore.DoTx(ctx, rt, pgx.Tx(tx), call) })
	t.Logf("second DoTx: %v after %v (runs %d)", second, d.Round(time.Millisecond), runs.Load())
	r21WantUntrackedWait(t, second, d, runs)
}

// r21UntrackedLease is the lease of the tests whose second call waits for
// a claim it cannot tell is its own transaction's: far longer than
// MaxWait, so that the wait ends while the claim's lease is live even on
// a loaded machine. (With r20Lease, 1 s past MaxWait, a poll of the wait
// that returned a second late found the lease expired, and the waiter
// rightly took the claim over and ran the effect again, its first run
// rolled back with the savepoint: CI, stop 53.)
const r21UntrackedLease = 20 * time.Second

// r21UntrackedRuntime is a runtime on its own Store of p with
// r21UntrackedLease and r20MaxWait.
func r21UntrackedRuntime(t *testing.T, p *pgxpool.Pool) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(r21UntrackedLease), runtime.WithMaxWait(r20MaxWait))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// r21WantUntrackedWait checks the documented answer to a second call whose
// transaction's own claim DoTx cannot tell: ErrInProgress after MaxWait,
// the effect run once in all.
func r21WantUntrackedWait(t *testing.T, err error, d time.Duration, runs *atomic.Int32) {
	t.Helper()
	if d >= r21UntrackedLease {
		t.Fatalf("second DoTx: %v after %v: the wait outlasted the claim's lease (%v), MaxWait %v", err, d.Round(time.Millisecond), r21UntrackedLease, r20MaxWait)
	}
	if !errors.Is(err, runtime.ErrInProgress) || d < r20MaxWait-50*time.Millisecond {
		t.Errorf("second DoTx (claim not tracked): %v after %v, want ErrInProgress after MaxWait (%v)", err, d.Round(time.Millisecond), r20MaxWait)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the effect ran %d times, want 1", n)
	}
}

// TestR21TwoStoresSavepointRetry: two runtimes, each with its own
// pgstore.Store (on one pool, or on two pools of one database), serve the
// same table; a transaction calls DoTx through the first, rolls back a
// savepoint around it and retries the item through the second. A Store
// knows only its own calls' claims (the documented limit): the second
// waits as for another transaction's claim.
func TestR21TwoStoresSavepointRetry(t *testing.T) {
	for _, twoPools := range []bool{false, true} {
		t.Run(fmt.Sprintf("twoPools=%v", twoPools), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt1 := r21UntrackedRuntime(t, p)
			p2 := p
			if twoPools {
				var err error
				p2, err = pgxpool.New(context.Background(), p.Config().ConnString())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p2.Close)
			}
			rt2 := r21UntrackedRuntime(t, p2)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)
			tx := r20Begin(ctx, t, p)
			if _, err := tx.Exec(ctx, "SAVEPOINT caller_sp"); err != nil {
				t.Fatal(err)
			}
			if _, err := pgstore.DoTx(ctx, rt1, tx, call); err != nil {
				t.Fatalf("first DoTx: %v", err)
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT caller_sp"); err != nil {
				t.Fatal(err)
			}
			var second error
			d := timed(func() { _, second = pgstore.DoTx(ctx, rt2, tx, call) })
			t.Logf("second DoTx (other store): %v after %v (runs %d)", second, d.Round(time.Millisecond), runs.Load())
			r21WantUntrackedWait(t, second, d, &runs)
		})
	}
}

// TestR21ExpiredOwnSuccessWaits: DoTx with a short TTL succeeds; the
// transaction stays open past the TTL (the docs: it commits an already
// expired SUCCESS) and calls DoTx again with the same identity. Nobody
// but this transaction holds the key; the second call waits MaxWait for
// its own transaction, then ErrInProgress.
func TestR21ExpiredOwnSuccessWaits(t *testing.T) {
	f := newR21Fixture(t)
	p, table, rt, ctx, runs := f.p, f.table, f.rt, f.ctx, &f.runs
	call := r20Call(table, "k1", runs, 10)
	call.TTL = 200 * time.Millisecond

	tx := r20Begin(ctx, t, p)
	if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
		t.Fatalf("first DoTx: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	var second error
	d := timed(func() { _, second = pgstore.DoTx(ctx, rt, tx, call) })
	t.Logf("second DoTx past the TTL: %v after %v (runs %d)", second, d.Round(time.Millisecond), runs.Load())
	if d > r20Quick {
		t.Errorf("second DoTx: %v after %v: the caller waited for its own transaction", second, d.Round(time.Millisecond))
	}
	if errors.Is(second, runtime.ErrInProgress) {
		t.Errorf("second DoTx: %v: told ErrInProgress for its own transaction's committed-to-be outcome", second)
	}
}

// TestR21SavepointRetryRace: transaction A takes a savepoint, calls DoTx,
// rolls back to the savepoint and, after a pause around the short lease,
// calls DoTx again (the abandoned-claim release); meanwhile transaction B
// calls DoTx with the same identity (takeovers of the lease expired claim
// race with A's read and release). Each commits or rolls back at random.
// At most one effect row commits per identity, and every caller whose
// transaction committed with an answer was told the committed row.
func TestR21SavepointRetryRace(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	const lease = 150 * time.Millisecond
	s := pgstore.New(p)
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	iters := 60
	if testing.Short() {
		iters = 10
	}
	for i := 0; i < iters; i++ {
		key := fmt.Sprintf("k%d", i)
		var runs atomic.Int32
		call := r20Call(table, key, &runs, 1)
		pauseA := time.Duration(i%7) * lease / 3
		startB := time.Duration((i*5)%9) * lease / 4
		commitA, commitB := i%3 != 0, i%4 != 1
		type res struct {
			o         order
			err       error
			committed bool
		}
		var ra, rb res
		done := make(chan struct{}, 2)
		go func() {
			defer func() { done <- struct{}{} }()
			tx, err := p.Begin(ctx)
			if err != nil {
				ra.err = err
				return
			}
			defer tx.Rollback(context.Background())
			_, _ = tx.Exec(ctx, "SAVEPOINT s")
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				ra.err = fmt.Errorf("first: %w", err)
			}
			_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
			time.Sleep(pauseA)
			ra.o, ra.err = pgstore.DoTx(ctx, rt, tx, call)
			if commitA {
				ra.committed = tx.Commit(ctx) == nil
			}
		}()
		go func() {
			defer func() { done <- struct{}{} }()
			time.Sleep(startB)
			tx, err := p.Begin(ctx)
			if err != nil {
				rb.err = err
				return
			}
			defer tx.Rollback(context.Background())
			rb.o, rb.err = pgstore.DoTx(ctx, rt, tx, call)
			if commitB {
				rb.committed = tx.Commit(ctx) == nil
			}
		}()
		<-done
		<-done
		var ids []int64
		rows, err := p.Query(ctx, "SELECT id FROM "+table+" WHERE ref = $1", key)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) > 1 {
			t.Errorf("%s: %d effect rows committed %v (A: %+v, B: %+v)", key, len(ids), ids, ra, rb)
			continue
		}
		for name, r := range map[string]res{"A": ra, "B": rb} {
			if r.err == nil && r.committed && (len(ids) != 1 || ids[0] != r.o.ID) {
				t.Errorf("%s: %s committed and was told order %d; committed rows %v (A: %+v, B: %+v)", key, name, r.o.ID, ids, ra, rb)
			}
		}
		t.Logf("%s: rows %v runs %d A{%v %v %d} B{%v %v %d}", key, ids, runs.Load(), ra.committed, ra.err, ra.o.ID, rb.committed, rb.err, rb.o.ID)
	}
}

// TestR21SavepointPatterns: savepoint patterns around DoTx in one
// transaction, then commit: the second call never waits for its own
// transaction, and exactly one effect row commits, the one the last
// answer names.
func TestR21SavepointPatterns(t *testing.T) {
	type step struct {
		sql  string // a statement, or "" for a DoTx call
		req  int    // DoTx's amount
		wait time.Duration
	}
	cases := []struct {
		name    string
		group   bool
		steps   []step
		wantErr error // of the last DoTx
	}{
		{"nested-rollback-outer", false, []step{{sql: "SAVEPOINT a"}, {sql: "SAVEPOINT b"}, {req: 1}, {sql: "RELEASE SAVEPOINT b"}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 1}}, nil},
		{"release-then-again", false, []step{{sql: "SAVEPOINT a"}, {req: 1}, {sql: "RELEASE SAVEPOINT a"}, {req: 1}}, nil},
		{"rollback-twice", false, []step{{sql: "SAVEPOINT a"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 1}}, nil},
		// Another request with the key after the rollback: the key stays
		// bound to the first request (review r46), as for a void claim of a
		// transaction that ended.
		{"rollback-other-payload", false, []step{{sql: "SAVEPOINT a"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 2}}, runtime.ErrKeyReused},
		{"rollback-past-lease", false, []step{{sql: "SAVEPOINT a"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a", wait: r20Lease + 200*time.Millisecond}, {req: 1}}, nil},
		{"group-rollback", true, []step{{sql: "SAVEPOINT a"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 1}}, nil},
		{"group-nested", true, []step{{sql: "SAVEPOINT a"}, {sql: "SAVEPOINT b"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT b"}, {req: 1}, {sql: "ROLLBACK TO SAVEPOINT a"}, {req: 1}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			var opts []pgstore.Option
			if tc.group {
				opts = append(opts, pgstore.WithGroupCommit(8))
			}
			rt, _ := r20Runtime(t, opts...)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			tx := r20Begin(ctx, t, p)
			var last order
			var lastErr error
			for i, st := range tc.steps {
				if st.sql != "" {
					if _, err := tx.Exec(ctx, st.sql); err != nil {
						t.Fatalf("step %d %s: %v", i, st.sql, err)
					}
					time.Sleep(st.wait)
					continue
				}
				d := timed(func() { last, lastErr = pgstore.DoTx(ctx, rt, tx, r20Call(table, "k1", &runs, st.req)) })
				t.Logf("step %d DoTx(amount %d): %+v %v after %v", i, st.req, last, lastErr, d.Round(time.Millisecond))
				if d > r20Quick {
					t.Errorf("step %d: DoTx took %v: waited for its own transaction", i, d.Round(time.Millisecond))
				}
			}
			if !errors.Is(lastErr, tc.wantErr) && !(tc.wantErr == nil && lastErr == nil) {
				t.Errorf("last DoTx: %v, want %v", lastErr, tc.wantErr)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			var ids []int64
			rows, _ := p.Query(ctx, "SELECT id FROM "+table)
			for rows.Next() {
				var id int64
				_ = rows.Scan(&id)
				ids = append(ids, id)
			}
			rows.Close()
			if lastErr == nil && (len(ids) != 1 || ids[0] != last.ID) {
				t.Errorf("committed rows %v, last answer %d", ids, last.ID)
			}
			if len(ids) > 1 {
				t.Errorf("committed rows %v", ids)
			}
			// A duplicate after the commit replays the committed answer.
			tx2 := r20Begin(ctx, t, p)
			o2, err := pgstore.DoTx(ctx, rt, tx2, r20Call(table, "k1", &runs, tc.steps[len(tc.steps)-1].req))
			t.Logf("duplicate after commit: %+v %v", o2, err)
			if lastErr == nil && (err != nil || o2.ID != last.ID) {
				t.Errorf("duplicate after commit: %+v %v, want order %d", o2, err, last.ID)
			}
		})
	}
}

// r21OneConnPool is a caller's pool of one connection (every transaction
// runs on the same *pgx.Conn), with lifetime, when positive, as its
// connections' MaxConnLifetime.
func r21OneConnPool(t *testing.T, lifetime time.Duration) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testPool(t).Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	if lifetime > 0 {
		cfg.MaxConnLifetime = lifetime
		cfg.MaxConnLifetimeJitter = 0
	}
	cp, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	return cp
}

// TestR21SameConnManyTransactions: one connection runs transaction after
// transaction of the same identity, each ending a different way; the next
// transaction's call never waits and never releases what it must not.
//
// "Never waits" is told by the runtime's own report of a wait (the wait
// phase, to its observer), not by the call's time alone: under load (a
// load of 19 on 2 cores) a call that waited for nobody took 950 ms. No
// other transaction runs here, so no row lock can hold a call up either;
// a call past the runtime's MaxWait waited whatever it reported.
func TestR21SameConnManyTransactions(t *testing.T) {
	for _, lifetime := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run(fmt.Sprintf("lifetime=%v", lifetime), func(t *testing.T) {
			p := testPool(t)
			cp := r21OneConnPool(t, lifetime)
			table := ordersTable(t, p)
			var waits atomic.Int32
			rt, err := runtime.New(pgstore.New(p), runtime.WithLease(r20Lease), runtime.WithMaxWait(r20MaxWait),
				runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
					if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseWait {
						waits.Add(1)
					}
				})))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 1)
			pcall := r21Call(table, "k1", &runs)
			_ = pcall
			// 1: savepoint rolled back, then commit: claim names an ended tx.
			tx, err := cp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = tx.Exec(ctx, "SAVEPOINT a")
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				t.Fatal(err)
			}
			_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT a")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(lifetime)
			// 2: same connection, a new transaction: runs at once, rolls back.
			tx, err = cp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var o order
			d := timed(func() { o, err = pgstore.DoTx(ctx, rt, tx, call) })
			if w := waits.Swap(0); err != nil || w > 0 || d >= r20MaxWait {
				t.Errorf("tx2: %v after %v (%d waits)", err, d, w)
			}
			_ = tx.Rollback(ctx)
			time.Sleep(lifetime)
			// 3: commits.
			tx, err = cp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d = timed(func() { o, err = pgstore.DoTx(ctx, rt, tx, call) })
			if w := waits.Swap(0); err != nil || w > 0 || d >= r20MaxWait {
				t.Errorf("tx3: %v after %v (%d waits)", err, d, w)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			// 4: replays tx3's answer.
			tx, err = cp.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			o4, err := pgstore.DoTx(ctx, rt, tx, call)
			if err != nil || o4.ID != o.ID {
				t.Errorf("tx4: %+v %v, want order %d", o4, err, o.ID)
			}
			_ = tx.Rollback(ctx)
			if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
				t.Errorf("%d rows committed, want 1", n)
			}
			t.Logf("runs %d", runs.Load())
		})
	}
}

// TestR21KilledCallerThenRetry: A's transaction (savepoint retry pattern)
// is killed with pg_terminate_backend at some point; B, another
// transaction, calls the same identity meanwhile. At most one row commits
// and a committed caller is told it.
func TestR21KilledCallerThenRetry(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	ap := r21OneConnPool(t, 0) // A's own: a kill never hits the store's pool
	for i := 0; i < 12; i++ {
		key := fmt.Sprintf("k%d", i)
		var runs atomic.Int32
		call := r20Call(table, key, &runs, 1)
		killAfter := time.Duration(i%6) * 3 * time.Millisecond
		var aErr error
		var aOK bool
		var aO order
		pidc := make(chan uint32, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			// The pool's one connection may be the one the last round
			// killed: pgx finds it dead on use, and the next Begin gets a
			// new one.
			tx, err := ap.Begin(ctx)
			for try := 1; err != nil && try < 3; try++ {
				tx, err = ap.Begin(ctx)
			}
			if err != nil {
				aErr = err
				return
			}
			defer tx.Rollback(context.Background())
			pidc <- tx.Conn().PgConn().PID()
			_, _ = tx.Exec(ctx, "SAVEPOINT s")
			_, _ = pgstore.DoTx(ctx, rt, tx, call)
			_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
			aO, aErr = pgstore.DoTx(ctx, rt, tx, call)
			aOK = aErr == nil && tx.Commit(ctx) == nil
		}()
		var pid uint32
		select {
		case pid = <-pidc:
		case <-done: // A could not begin (it sent no PID): it would wait forever
			t.Fatalf("%s: A's transaction did not begin: %v", key, aErr)
		}
		time.Sleep(killAfter)
		_, _ = p.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		<-done
		tx := r20Begin(ctx, t, p)
		bO, bErr := pgstore.DoTx(ctx, rt, tx, call)
		bOK := bErr == nil && tx.Commit(ctx) == nil
		n := count(t, p, "SELECT count(*) FROM "+table+" WHERE ref = $1", key)
		t.Logf("%s kill after %v: A %v %v %d, B %v %v %d, rows %d, runs %d", key, killAfter, aOK, aErr, aO.ID, bOK, bErr, bO.ID, n, runs.Load())
		if n > 1 || (aOK && bOK && aO.ID != bO.ID) || (bErr != nil) {
			t.Errorf("%s: rows %d, A %v %d, B %v %v %d", key, n, aOK, aO.ID, bOK, bErr, bO.ID)
		}
	}
}

// TestR21ObserverPanicRecoveredCommit: F2 through the runtime's Observer:
// its callback for the effect's phase (called after the effect returned,
// before the renewals stop and before Finish) panics once; the caller
// recovers and commits; a duplicate runs the effect again.
func TestR21ObserverPanicRecoveredCommit(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	var panicNext atomic.Bool
	obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
		if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseEffect && panicNext.CompareAndSwap(true, false) {
			panic("r21: observer panicked")
		}
	})
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(r20Lease), runtime.WithMaxWait(r20MaxWait), runtime.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 1)
	tx := r20Begin(ctx, t, p)
	panicNext.Store(true)
	v := r21Recover(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) })
	if v != nil {
		t.Errorf("the observer's panic went through DoTx: %v", v)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Logf("commit after the recovered panic: %v", err)
	}
	tx2 := r20Begin(ctx, t, p)
	if _, err := pgstore.DoTx(ctx, rt, tx2, call); err != nil {
		t.Logf("duplicate: %v", err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
		t.Errorf("%d effect rows committed for one identity (effect ran %d times), want 1", n, runs.Load())
	}
}

// TestR21ObserverPanicHeartbeatLeaks: F1 through the Observer: the panic
// comes before the renewals stop, so the heartbeat goes on renewing the
// abandoned claim; past the lease, the caller's retry in its transaction is
// still told ErrInProgress ("called from inside the effect").
func TestR21ObserverPanicHeartbeatLeaks(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	var panicNext atomic.Bool
	obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
		if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseEffect && panicNext.CompareAndSwap(true, false) {
			panic("r21: observer panicked")
		}
	})
	const lease = 600 * time.Millisecond
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(r20MaxWait), runtime.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 1)
	tx := r20Begin(ctx, t, p)
	if _, err := tx.Exec(ctx, "SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	panicNext.Store(true)
	if v := r21Recover(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) }); v != nil {
		t.Errorf("the observer's panic went through DoTx: %v", v)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT caller_sp"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * lease)
	var lease1 time.Time
	_ = p.QueryRow(ctx, "SELECT lease_expires_at FROM idem_records WHERE key = 'k1' AND scope = $1", runtime.ScopeFrom(ctx)).Scan(&lease1)
	if now := time.Now(); lease1.After(now) {
		t.Errorf("the claim's lease expires at %v, after now (%v): renewed after its call returned", lease1, now)
	}
	_, second := pgstore.DoTx(ctx, rt, tx, call)
	t.Logf("second DoTx 3 leases later: %v", second)
	if second != nil {
		t.Errorf("second DoTx after the savepoint's rollback, 3 leases later: %v", second)
	}
}

// TestR21RollbackOtherPayloadPastLease: SAVEPOINT; DoTx(k, amount 1);
// ROLLBACK TO; then, past the first claim's lease, DoTx(k, amount 2): the
// same answer as within the lease (TestR21SavepointPatterns/
// rollback-other-payload): ErrKeyReused, the key bound to the first
// request (review r46; review r21 had them both run the effect).
func TestR21RollbackOtherPayloadPastLease(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	const lease = 300 * time.Millisecond
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(r20MaxWait))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	tx := r20Begin(ctx, t, p)
	_, _ = tx.Exec(ctx, "SAVEPOINT a")
	if _, err := pgstore.DoTx(ctx, rt, tx, r20Call(table, "k1", &runs, 1)); err != nil {
		t.Fatal(err)
	}
	_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT a")
	time.Sleep(2 * lease)
	var second error
	d := timed(func() { _, second = pgstore.DoTx(ctx, rt, tx, r20Call(table, "k1", &runs, 2)) })
	t.Logf("second DoTx (other payload, past the lease): %v after %v", second, d.Round(time.Millisecond))
	if !errors.Is(second, runtime.ErrKeyReused) || runs.Load() != 1 {
		t.Errorf("second DoTx: %v (effect runs %d): within the lease the same call is ErrKeyReused", second, runs.Load())
	}
}

// TestR21StaleSnapshotOnTrackedConn: a transaction's own outcome is
// replayed even once expired (TestR21ExpiredOwnSuccessWaits), and "own"
// means written by this very transaction, not by an earlier one on the
// same connection. T1 on connection C runs DoTx(k) and commits (life 1).
// T2, REPEATABLE READ on C, takes its snapshot; life 1 expires; life 2
// of k runs through runtime.Do. T2's DoTx(k) sees life 1's expired SUCCESS
// in its snapshot, which T1 (not T2) wrote on C: it must not replay it.
func TestR21StaleSnapshotOnTrackedConn(t *testing.T) {
	p := testPool(t)
	cp := r21OneConnPool(t, 0) // the callers' connection C; claims go through p
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(3*time.Second), runtime.WithTTL(time.Second), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	req := orderReq{OrderID: "k1", Amount: 1}
	dotx := func(tx pgx.Tx, ref string) (order, error) {
		return pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "R21.Stale", Key: "k1", Request: req,
			Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
				return order{Ref: ref, Amount: r.Amount}, nil
			}})
	}
	tx1, err := cp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := dotx(tx1, "life1"); err != nil || o.Ref != "life1" {
		t.Fatalf("life 1: %+v %v", o, err)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx2, err := cp.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(context.Background())
	if _, err := tx2.Exec(ctx, "SELECT 1"); err != nil { // the snapshot
		t.Fatal(err)
	}
	time.Sleep(1300 * time.Millisecond) // life 1 expires
	life2 := make(chan error, 1)
	go func() {
		o, err := runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: "R21.Stale", Key: "k1", Request: req,
			Effect: func(ctx context.Context, r orderReq) (order, error) {
				time.Sleep(1500 * time.Millisecond)
				return order{Ref: "life2", Amount: r.Amount}, nil
			}})
		if err == nil && o.Ref != "life2" {
			err = fmt.Errorf("life 2 replayed %+v", o)
		}
		life2 <- err
	}()
	time.Sleep(300 * time.Millisecond) // life 2 claimed, in flight
	got, errTx := dotx(tx2, "dotx")
	t.Logf("DoTx in T2: %+v %v", got, errTx)
	if e := <-life2; e != nil {
		t.Fatalf("life 2: %v", e)
	}
	if errTx == nil && got.Ref == "life1" {
		t.Errorf("T2 was told life 1's expired outcome %+v, which an earlier transaction on its connection wrote, while life 2 ran", got)
	}
}

// TestR21PanicBetweenStepsUndoesTheCall: a panic that escapes between
// DoTx's steps, after the effect and before its savepoint is released or
// rolled back (here pgstore's test hook before the SUCCESS write; in a
// program, code of its own the runtime calls there), rolls back the
// effect's writes and releases the claim before it goes on. The caller
// recovers and commits; a duplicate then runs the effect once: one row.
func TestR21PanicBetweenStepsUndoesTheCall(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	s := pgstore.New(p)
	var panicNext atomic.Bool
	pgstore.SetBeforeSuccess(s, func() {
		if panicNext.CompareAndSwap(true, false) {
			panic("r21: between steps")
		}
	})
	rt, err := runtime.New(s, runtime.WithLease(r20Lease), runtime.WithMaxWait(r20MaxWait))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 1)
	tx := r20Begin(ctx, t, p)
	panicNext.Store(true)
	if v := r21Recover(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) }); v == nil {
		t.Fatal("the hook's panic did not go on through DoTx")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the recovered panic: %v", err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 0 {
		t.Errorf("%d effect rows committed with the panicked call, want 0 (its savepoint rolled back)", n)
	}
	tx2 := r20Begin(ctx, t, p)
	d := timed(func() { _, err = pgstore.DoTx(ctx, rt, tx2, call) })
	if err != nil || d > r20Quick {
		t.Errorf("duplicate after the panicked call: %v after %v, want the effect run at once (the claim released)", err, d.Round(time.Millisecond))
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 || runs.Load() != 2 {
		t.Errorf("%d effect rows committed, effect ran %d times; want 1 row, 2 runs", n, runs.Load())
	}
}
