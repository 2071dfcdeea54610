package pgstore_test

// Review r20 (a fresh adversarial review of DoTx, public docs only): one
// transaction calling DoTx more than once with one identity, and such a
// transaction beside duplicates. Promises under test (README "Local
// effects", DoTx's doc): the effect runs once per committed outcome plus
// once per rollback; no caller whose transaction commits is told anything
// but its answer; a caller's transaction stays usable unless DoTx says it
// is not. TestR20CancelDuringOwnStatement (its CurrentXact and SAVEPOINT
// cases) and TestR20RepeatableReadStaleReplay failed before their fixes
// (reliability.md rows 25.20, 25.21); the rest held. Open (issue 25's
// note): a second call after a savepoint rolled back around the first, and
// a call from inside its own effect, still wait for their own transaction.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

const r20Lease = 3 * time.Second
const r20MaxWait = 2 * time.Second

// r20Quick is how long a call that waits for nobody may take here.
const r20Quick = 800 * time.Millisecond

func r20Runtime(t *testing.T, opts ...pgstore.Option) (*runtime.Runtime, *pgstore.Store) {
	t.Helper()
	return r20RuntimeWait(t, r20MaxWait, opts...)
}

func r20RuntimeWait(t *testing.T, maxWait time.Duration, opts ...pgstore.Option) (*runtime.Runtime, *pgstore.Store) {
	t.Helper()
	s := pgstore.New(testPool(t), opts...)
	rt, err := runtime.New(s, runtime.WithLease(r20Lease), runtime.WithMaxWait(maxWait))
	if err != nil {
		t.Fatal(err)
	}
	return rt, s
}

func r20Call(table, key string, runs *atomic.Int32, amount int) pgstore.TxCall[orderReq, order] {
	return pgstore.TxCall[orderReq, order]{
		Operation: "R20.Create", Key: key,
		Request: orderReq{OrderID: key, Amount: amount},
		Effect:  insertOrder(table, runs),
	}
}

// r20Begin begins a transaction on p, rolled back when the test ends (a
// no-op once it has committed).
func r20Begin(ctx context.Context, t *testing.T, p *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// timed runs f and returns its duration.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestR20AbortedBeforeSecondCall: DoTx succeeds, then a statement of the
// caller fails (the transaction is aborted), then the caller calls DoTx
// again with the same identity. The transaction can never commit: the
// second call must say so at once (not wait MaxWait for its own
// transaction, nor answer ErrInProgress as if another call held the key).
func TestR20AbortedBeforeSecondCall(t *testing.T) {
	for _, tc := range []struct{ same, inSavepoint bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		same := tc.same
		t.Run(fmt.Sprintf("sameRequest=%v/inSavepoint=%v", same, tc.inSavepoint), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt, _ := r20Runtime(t)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)
			tx := r20Begin(ctx, t, p)
			if tc.inSavepoint {
				// the failed statement aborts the savepoint's subtransaction
				// only: the top-level transaction stays in progress.
				if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				t.Fatalf("first DoTx: %v", err)
			}
			scope := runtime.ScopeFrom(ctx)
			t.Logf("record after the first call: %s", r20Record(t, p, scope, "R20.Create", "k1"))
			if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("1/0 succeeded")
			}
			t.Logf("record after 1/0: %s", r20Record(t, p, scope, "R20.Create", "k1"))
			second := call
			if !same {
				second = r20Call(table, "k1", &runs, 11)
			}
			var err2 error
			d := timed(func() { _, err2 = pgstore.DoTx(ctx, rt, tx, second) })
			t.Logf("second DoTx in the aborted transaction: %v after %v", err2, d.Round(time.Millisecond))
			t.Logf("record after the second call: %s", r20Record(t, p, scope, "R20.Create", "k1"))
			if err2 == nil {
				t.Errorf("second DoTx succeeded in an aborted transaction")
			}
			if errors.Is(err2, runtime.ErrInProgress) {
				t.Errorf("second DoTx told ErrInProgress: the only call in flight is its own aborted transaction (%v)", err2)
			}
			if d > r20Quick {
				t.Errorf("second DoTx waited %v for its own (aborted) transaction", d.Round(time.Millisecond))
			}
		})
	}
}

// r20Record reads the raw record row (state, version, xact status, lease left).
func r20Record(t *testing.T, p *pgxpool.Pool, scope, op, key string) string {
	t.Helper()
	var s string
	err := p.QueryRow(context.Background(), `SELECT format('state=%s v=%s xact=%s xstatus=%s lease_left=%s owner=%s',
		state, version, xact, pg_xact_status(xact), lease_expires_at - clock_timestamp(), owner)
		FROM idem_records WHERE scope=$1 AND operation=$2 AND key=$3`, scope, op, key).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// r20Tx wraps the caller's transaction: it logs DoTx's statements and, when
// slow(sql) says so, runs pg_sleep on the transaction's connection with the
// statement's context first (a slow statement), so that a context cancelled
// meanwhile is cancelled while a statement of DoTx runs in tx.
type r20Tx struct {
	pgx.Tx
	t      *testing.T
	slow   func(sql string) bool
	log    bool
	parent *r20Tx
}

func (w *r20Tx) root() *r20Tx {
	for w.parent != nil {
		w = w.parent
	}
	return w
}

// Begin wraps the savepoint (a nested transaction) too.
func (w *r20Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := w.before(ctx, "SAVEPOINT (nested Begin)"); err != nil {
		return nil, err
	}
	n, err := w.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &r20Tx{Tx: n, t: w.t, parent: w}, nil
}

func (w *r20Tx) Commit(ctx context.Context) error {
	if w.parent != nil {
		if err := w.before(ctx, "RELEASE SAVEPOINT (nested Commit)"); err != nil {
			return err
		}
	}
	return w.Tx.Commit(ctx)
}

func (w *r20Tx) before(ctx context.Context, sql string) error {
	r := w.root()
	if r.log {
		w.t.Logf("tx statement (nested %v): %.90q", w.parent != nil, sql)
	}
	if r.slow != nil && r.slow(sql) {
		_, err := w.Tx.Exec(ctx, "SELECT pg_sleep(0.5)")
		return err
	}
	return nil
}

func (w *r20Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := w.before(ctx, sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return w.Tx.Exec(ctx, sql, args...)
}

func (w *r20Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := w.before(ctx, sql); err != nil {
		return nil, err
	}
	return w.Tx.Query(ctx, sql, args...)
}

type r20ErrRow struct{ err error }

func (r r20ErrRow) Scan(...any) error { return r.err }

func (w *r20Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := w.before(ctx, sql); err != nil {
		return r20ErrRow{err}
	}
	return w.Tx.QueryRow(ctx, sql, args...)
}

func (w *r20Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if w.root().log {
		w.t.Logf("tx batch of %d", b.Len())
	}
	return w.Tx.SendBatch(ctx, b)
}

// TestR20CancelDuringOwnStatement: the caller's context is cancelled while
// one of DoTx's own statements in tx runs (made slow by the wrapper: the
// transaction ID and isolation level asked by a first call, or the record
// read by a second call of one identity). The caller's transaction must stay
// usable, or DoTx's error must say it is not (ErrRollbackRequired). The
// caller's own row, written before DoTx, is the witness: when DoTx's error
// does not say the transaction is lost, committing it must keep that row.
func TestR20CancelDuringOwnStatement(t *testing.T) {
	for _, cancelRequest := range []bool{false, true} {
		for _, which := range []string{"CurrentXact", "CurrentXact-second", "SAVEPOINT (nested Begin)", "TransitionCAS", "RELEASE SAVEPOINT", "Get"} {
			t.Run(fmt.Sprintf("cancelRequest=%v/%s", cancelRequest, which), func(t *testing.T) {
				testR20CancelDuringOwnStatement(t, cancelRequest, which)
			})
		}
	}
}

func testR20CancelDuringOwnStatement(t *testing.T, cancelRequest bool, which string) {
	base := testPool(t)
	p := base
	if cancelRequest {
		cfg := base.Config()
		cfg.MaxConns = 4
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: 0, DeadlineDelay: 5 * time.Second}
		}
		var err error
		p, err = pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
	}
	table := ordersTable(t, base)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 10)
	raw, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Rollback(context.Background())
	if _, err := raw.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ('callers-own', 1)"); err != nil {
		t.Fatal(err)
	}
	tx := &r20Tx{Tx: raw, t: t}
	switch which {
	case "Get":
		if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
			t.Fatalf("first DoTx: %v", err)
		}
	case "CurrentXact-second":
		// a first call whose effect fails (not permanently): released, the
		// second call claims again.
		failing := call
		failing.Effect = func(context.Context, pgx.Tx, orderReq) (order, error) { return order{}, errors.New("try again") }
		if _, err := pgstore.DoTx(ctx, rt, tx, failing); err == nil {
			t.Fatal("first DoTx succeeded")
		}
		which = "CurrentXact"
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tx.slow = func(sql string) bool {
		if !strings.Contains(sql, which) {
			return false
		}
		time.AfterFunc(100*time.Millisecond, cancel)
		return true
	}
	_, err2 := pgstore.DoTx(cctx, rt, tx, call)
	tx.slow = nil
	t.Logf("DoTx with the context cancelled during %s: %v", which, err2)
	if err2 == nil {
		t.Logf("DoTx succeeded (the statement ended before the cancel)")
	}
	defer func() {
		// whatever DoTx said, once tx has ended the key is free at once.
		_ = raw.Rollback(context.Background())
		var doRuns atomic.Int32
		var od order
		var errD error
		d := timed(func() { od, errD = doR20Dup(ctx, rt, table, &doRuns, call) })
		if (errD != nil || d > r20Quick) && od.Ref != "k1" {
			t.Errorf("after DoTx's error and tx's end, a duplicate: %+v %v after %v (key not free)", od, errD, d.Round(time.Millisecond))
		}
	}()
	if errors.Is(err2, pgstore.ErrRollbackRequired) {
		return // DoTx said so
	}
	_, errSel := raw.Exec(context.Background(), "SELECT 1")
	errCommit := raw.Commit(context.Background())
	own := count(t, base, "SELECT count(*) FROM "+table+" WHERE ref = 'callers-own'")
	t.Logf("after DoTx: SELECT 1: %v; commit: %v; caller's own row committed: %d", errSel, errCommit, own)
	if errSel != nil || errCommit != nil || own != 1 {
		t.Errorf("DoTx returned %v (not ErrRollbackRequired), but the caller's transaction was lost: SELECT 1: %v, commit: %v, own rows %d", err2, errSel, errCommit, own)
	}
}

// TestR20GroupCommitTwice: with group commit, one transaction calls DoTx
// twice with one identity (the second replays what tx holds), while other
// callers keep the store's batches busy. Within the lease the replay is at
// once; past it, after the claim's tries on a held row (0.7 s).
func TestR20GroupCommitTwice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		load  bool
		order int
		past  bool
	}{
		{"lone", false, 0, false},
		{"lone-insertfirst", false, -1, false},
		{"load", true, 0, false},
		{"load-insertfirst", true, -1, false},
		{"load-pastlease", true, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			// A wait is told by the runtime's own report of one (the wait
			// phase), not by the call's time alone: under load (CI's cold
			// run beside other work) a past-lease replay that waited for
			// nobody took 1.6 s. Its own transaction is the only one that
			// could hold it up, and a call that waited for it would end at
			// MaxWait without the replay.
			var waits atomic.Int32
			s := pgstore.New(p, pgstore.WithGroupCommit(0))
			rt, err := runtime.New(s, runtime.WithLease(r20Lease), runtime.WithMaxWait(r20MaxWait),
				runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
					if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseWait && e.Operation == "R20.Create" {
						waits.Add(1)
					}
				})))
			if err != nil {
				t.Fatal(err)
			}
			if tc.order != 0 {
				pgstore.SetClaimOrder(s, tc.order)
			}
			ctx := scopedCtx(t.Name())
			stop := make(chan struct{})
			done := make(chan struct{})
			if tc.load {
				go func() {
					defer close(done)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						var runsL atomic.Int32
						var wg sync.WaitGroup
						for j := range 4 {
							wg.Add(1)
							go func() {
								defer wg.Done()
								c := r20Call(table, fmt.Sprintf("load-%d-%d", i, j), &runsL, 1)
								_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
									_, err := pgstore.DoTx(ctx, rt, tx, c)
									return err
								})
							}()
						}
						wg.Wait()
					}
				}()
			} else {
				close(done)
			}
			defer func() { close(stop); <-done }()
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)
			tx := r20Begin(ctx, t, p)
			first, err := pgstore.DoTx(ctx, rt, tx, call)
			if err != nil {
				t.Fatalf("first DoTx: %v", err)
			}
			if tc.past {
				time.Sleep(r20Lease + 200*time.Millisecond)
			}
			var second order
			var err2 error
			waits.Store(0)
			d := timed(func() { second, err2 = pgstore.DoTx(ctx, rt, tx, call) })
			t.Logf("second DoTx: %+v %v after %v", second, err2, d.Round(time.Millisecond))
			if err2 != nil || second != first {
				t.Errorf("second DoTx: %+v, %v; want the replay of %+v", second, err2, first)
			}
			if w := waits.Load(); w > 0 || d >= r20MaxWait {
				t.Errorf("second DoTx took %v and waited %d times (MaxWait %v): it waited for its own transaction", d.Round(time.Millisecond), w, r20MaxWait)
			}
			if runs.Load() != 1 {
				t.Errorf("effect ran %d times", runs.Load())
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestR20RepeatableReadStaleReplay: DoTx refuses a REPEATABLE READ
// transaction before the effect runs, but its replay path reads the record
// "as the transaction sees it". Schedule: the key's first life ends SUCCESS
// ("life1", TTL 1 s); a REPEATABLE READ transaction takes its snapshot; the
// record expires; a runtime.Do call claims the key's second life and runs
// (slow effect, "life2"); the RR transaction calls DoTx: the claim finds the
// second life in flight, DoTx reads the record in the RR snapshot (the
// expired first life's SUCCESS) and replays it? The caller then commits.
// Its answer is the second life's outcome (or ErrNotReadCommitted), never
// an expired one's.
func TestR20RepeatableReadStaleReplay(t *testing.T) {
	for _, tc := range []struct {
		same bool
		iso  pgx.TxIsoLevel
	}{{true, pgx.RepeatableRead}, {false, pgx.RepeatableRead}, {true, pgx.Serializable}} {
		sameRequest := tc.same
		t.Run(fmt.Sprintf("sameRequest=%v/%s", sameRequest, tc.iso), func(t *testing.T) {
			p := testPool(t)
			s := pgstore.New(p)
			rt, err := runtime.New(s, runtime.WithLease(3*time.Second), runtime.WithTTL(time.Second), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			req1 := orderReq{OrderID: "k1", Amount: 1}
			req2 := req1
			if !sameRequest {
				req2.Amount = 2
			}
			life := func(ref string, d time.Duration, req orderReq) (order, error) {
				return runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: "R20.Create", Key: "k1", Request: req,
					Effect: func(ctx context.Context, r orderReq) (order, error) {
						time.Sleep(d)
						return order{Ref: ref, Amount: r.Amount}, nil
					}})
			}
			if o, err := life("life1", 0, req1); err != nil || o.Ref != "life1" {
				t.Fatalf("life1: %+v %v", o, err)
			}
			tx, err := p.BeginTx(ctx, pgx.TxOptions{IsoLevel: tc.iso})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the snapshot
				t.Fatal(err)
			}
			time.Sleep(1300 * time.Millisecond)
			life2 := make(chan error, 1)
			go func() {
				o, err := life("life2", 1500*time.Millisecond, req2)
				if err == nil && o.Ref != "life2" {
					err = fmt.Errorf("life2 replayed %+v", o)
				}
				life2 <- err
			}()
			time.Sleep(300 * time.Millisecond) // life2 claimed, in flight
			scope := runtime.ScopeFrom(ctx)
			t.Logf("record now: %s", r20Record(t, p, scope, "R20.Create", "k1"))
			var runs atomic.Int32
			got, errTx := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "R20.Create", Key: "k1", Request: req1,
				Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					runs.Add(1)
					return order{Ref: "dotx", Amount: r.Amount}, nil
				}})
			t.Logf("DoTx in the REPEATABLE READ transaction: %+v %v (effect runs %d)", got, errTx, runs.Load())
			if e := <-life2; e != nil {
				t.Fatalf("life2: %v", e)
			}
			if errTx == nil {
				if err := tx.Commit(ctx); err != nil {
					t.Logf("commit: %v", err)
				} else if got.Ref == "life1" {
					t.Errorf("a caller whose transaction committed was told the expired first life's outcome %+v while the second life ran (its answer: life2's outcome%s, or ErrNotReadCommitted)", got, map[bool]string{true: "", false: " or ErrKeyReused"}[sameRequest])
				}
			}
		})
	}
}

// TestR20DuplicateBesideHeldRow: T1's DoTx(k) wrote SUCCESS in T1, which
// stays open 4 s. A runtime.Do duplicate D of k starts (its store's claims
// insert first, or read first; with and without group commit); 50 ms later
// T1 calls DoTx(k2), another key. T1's second call waits for nobody but its
// own claim; D must not wait on T1's row lock (it is told ErrInProgress
// after MaxWait plus one claim's tries, or replays T1's outcome once T1
// commits), and T1's DoTx(k2) must not wait behind D's claim for T1's own
// transaction.
func TestR20DuplicateBesideHeldRow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order int
		group bool
	}{
		{"insertfirst", -1, false},
		{"readfirst", 1, false},
		{"group-insertfirst", -1, true},
		{"group-readfirst", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			var opts []pgstore.Option
			if tc.group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			rt, s := r20Runtime(t, opts...)
			pgstore.SetClaimOrder(s, tc.order)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)
			tx := r20Begin(ctx, t, p)
			first, err := pgstore.DoTx(ctx, rt, tx, call)
			if err != nil {
				t.Fatal(err)
			}
			type res struct {
				o   order
				err error
				d   time.Duration
			}
			dup := make(chan res, 1)
			go func() {
				var r res
				r.d = timed(func() { r.o, r.err = doR20Dup(ctx, rt, table, &runs, call) })
				dup <- r
			}()
			time.Sleep(50 * time.Millisecond)
			var err2 error
			d2 := timed(func() { _, err2 = pgstore.DoTx(ctx, rt, tx, r20Call(table, "k2", &runs, 20)) })
			t.Logf("T1's DoTx(k2): %v after %v", err2, d2.Round(time.Millisecond))
			if err2 != nil || d2 > r20Quick {
				t.Errorf("T1's DoTx(k2): %v after %v: it waited for its own transaction", err2, d2.Round(time.Millisecond))
			}
			commitAt := time.Now().Add(4 * time.Second)
			var r res
			select {
			case r = <-dup:
			case <-time.After(time.Until(commitAt)):
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				r = <-dup
				t.Errorf("the duplicate waited on T1's row lock until T1 committed (%+v %v after %v)", r.o, r.err, r.d.Round(time.Millisecond))
				return
			}
			t.Logf("duplicate: %+v %v after %v", r.o, r.err, r.d.Round(time.Millisecond))
			if !errors.Is(r.err, runtime.ErrInProgress) && r.o != first {
				t.Errorf("duplicate told %+v %v", r.o, r.err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 2 {
				t.Errorf("effects ran %d times, want 2 (k1, k2)", runs.Load())
			}
		})
	}
}

// doR20Dup is a runtime.Do duplicate of a DoTx call; its effect counts a run
// and returns a marker.
func doR20Dup(ctx context.Context, rt *runtime.Runtime, table string, runs *atomic.Int32, c pgstore.TxCall[orderReq, order]) (order, error) {
	return runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: c.Operation, Key: c.Key, Request: c.Request,
		Effect: func(ctx context.Context, r orderReq) (order, error) {
			runs.Add(1)
			return order{ID: -1, Ref: "do:" + r.OrderID, Amount: r.Amount}, nil
		}})
}

// TestR20SavepointRollbackRace: T1 rolls back a savepoint around a
// successful DoTx(k) (the claim still names T1, its lease live); a
// runtime.Do duplicate D and T1's second DoTx(k) then race for the key at
// the lease's end (MaxWait 10 s). Whoever wins, T1 commits, both are told
// the committed outcome, and the effect ran once per committed outcome plus
// once per rollback (T1's first run).
func TestR20SavepointRollbackRace(t *testing.T) {
	for _, dFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("dupFirst=%v", dFirst), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt, _ := r20RuntimeWait(t, 10*time.Second)
			ctx := scopedCtx(t.Name())
			var txRuns, doRuns atomic.Int32
			call := r20Call(table, "k1", &txRuns, 10)
			tx := r20Begin(ctx, t, p)
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
			type res struct {
				o   order
				err error
			}
			dup := make(chan res, 1)
			startDup := func() {
				go func() {
					var r res
					r.o, r.err = doR20Dup(ctx, rt, table, &doRuns, call)
					dup <- r
				}()
			}
			if dFirst {
				startDup()
				time.Sleep(20 * time.Millisecond)
			} else {
				time.AfterFunc(20*time.Millisecond, startDup)
			}
			got, err2 := pgstore.DoTx(ctx, rt, tx, call)
			if err2 != nil {
				t.Fatalf("T1's second DoTx: %v", err2)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-dup
			rows := count(t, p, "SELECT count(*) FROM "+table)
			t.Logf("T1 told %+v; D told %+v %v; tx runs %d, do runs %d, rows %d", got, r.o, r.err, txRuns.Load(), doRuns.Load(), rows)
			if r.err != nil || r.o != got {
				t.Errorf("T1 and D told different outcomes: %+v vs %+v %v", got, r.o, r.err)
			}
			committed := rows + int(doRuns.Load())
			if committed != 1 {
				t.Errorf("%d committed outcomes", committed)
			}
			if int(txRuns.Load()+doRuns.Load()) != committed+1 {
				t.Errorf("effect ran %d times for %d committed outcome(s) and 1 rollback", txRuns.Load()+doRuns.Load(), committed)
			}
		})
	}
}

// TestR20CancelWhileWaiting: T2's DoTx holds k1 (SUCCESS written, T2
// open); T1, with a row of its own, calls DoTx(k1) with a context
// cancelled at 300 ms while it waits for T2. DoTx returns the
// cancellation; T1 must stay usable (its own row commits), and once T2
// rolls back the key is free at once. (Review r20 ran this in the
// schedule of its finding 1, a savepoint rolled back around T1's own first
// call: that call no longer waits.)
func TestR20CancelWhileWaiting(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20RuntimeWait(t, 10*time.Second)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 10)
	t2 := r20Begin(ctx, t, p)
	if _, err := pgstore.DoTx(ctx, rt, t2, call); err != nil {
		t.Fatal(err)
	}
	tx := r20Begin(ctx, t, p)
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ('callers-own', 1)"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var err2 error
	d := timed(func() { _, err2 = pgstore.DoTx(cctx, rt, tx, call) })
	t.Logf("DoTx waiting for T2, cancelled at 300 ms: %v after %v", err2, d.Round(time.Millisecond))
	if err2 == nil {
		t.Fatalf("DoTx succeeded while T2 held the key")
	}
	if errors.Is(err2, pgstore.ErrRollbackRequired) {
		return
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after a cancelled DoTx that did not say the transaction was lost: %v", err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table+" WHERE ref = 'callers-own'"); n != 1 {
		t.Errorf("caller's own row: %d", n)
	}
	// T2 rolls back: the key is free at once.
	if err := t2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var doRuns atomic.Int32
	var o order
	var err error
	d = timed(func() { o, err = doR20Dup(ctx, rt, table, &doRuns, call) })
	if err != nil || doRuns.Load() != 1 || d > r20Quick {
		t.Errorf("after T2 rolled back: duplicate %+v %v after %v (runs %d)", o, err, d.Round(time.Millisecond), doRuns.Load())
	}
}

// TestR20MixedRounds: seeded rounds of one key: T1 calls DoTx twice (a
// savepoint around the first, rolled back half of the time; a pause of up
// to 1.2 leases between), then commits or rolls back; T2 calls DoTx in its
// own transaction (commits or rolls back); D calls runtime.Do. Checked:
// at most one committed outcome (T1's or T2's committed rows, D's runs), and
// every answer given to a caller whose transaction committed (or to D) is
// the committed outcome's.
func TestR20MixedRounds(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("R20_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("R20_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 20))
	rounds := 12
	if s := os.Getenv("R20_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	p := testPool(t)
	table := ordersTable(t, p)
	lease := time.Second
	var opts []pgstore.Option
	if os.Getenv("R20_GROUP") != "" {
		opts = append(opts, pgstore.WithGroupCommit(0))
	}
	s := pgstore.New(p, opts...)
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		key := fmt.Sprintf("k%d", round)
		ctx := scopedCtx(t.Name())
		var runs, doRuns atomic.Int32
		call := r20Call(table, key, &runs, 10)
		sp := rng.IntN(2) == 0
		pause := time.Duration(rng.IntN(1200)) * time.Millisecond
		t1Commit := rng.IntN(4) != 0
		t2Commit := rng.IntN(3) != 0
		t2Delay := time.Duration(rng.IntN(1500)) * time.Millisecond
		dDelay := time.Duration(rng.IntN(1500)) * time.Millisecond
		type answer struct {
			who       string
			o         order
			err       error
			committed bool
		}
		var mu sync.Mutex
		var answers []answer
		add := func(a answer) { mu.Lock(); answers = append(answers, a); mu.Unlock() }
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { // T1
			defer wg.Done()
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(context.Background())
			if sp {
				_, _ = tx.Exec(ctx, "SAVEPOINT s")
			}
			o1, e1 := pgstore.DoTx(ctx, rt, tx, call)
			if sp {
				_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
			}
			time.Sleep(pause)
			o2, e2 := pgstore.DoTx(ctx, rt, tx, call)
			committed := false
			if t1Commit {
				committed = tx.Commit(ctx) == nil
			}
			if !sp {
				add(answer{"T1#1", o1, e1, committed})
			}
			add(answer{"T1#2", o2, e2, committed})
		}()
		go func() { // T2
			defer wg.Done()
			time.Sleep(t2Delay)
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(context.Background())
			o, e := pgstore.DoTx(ctx, rt, tx, call)
			committed := false
			if t2Commit {
				committed = tx.Commit(ctx) == nil
			}
			add(answer{"T2", o, e, committed})
		}()
		go func() { // D
			defer wg.Done()
			time.Sleep(dDelay)
			o, e := doR20Dup(ctx, rt, table, &doRuns, call)
			add(answer{"D", o, e, true})
		}()
		wg.Wait()
		rows := count(t, p, "SELECT count(*) FROM "+table+" WHERE ref = $1", key)
		desc := fmt.Sprintf("round %d (sp=%v pause=%v t1Commit=%v t2Commit=%v t2Delay=%v dDelay=%v)", round, sp, pause, t1Commit, t2Commit, t2Delay, dDelay)
		var committedO *order
		if rows == 1 {
			var o order
			if err := p.QueryRow(context.Background(), "SELECT id, ref, amount FROM "+table+" WHERE ref = $1", key).Scan(&o.ID, &o.Ref, &o.Amount); err != nil {
				t.Fatal(err)
			}
			committedO = &o
		}
		if rows+int(doRuns.Load()) > 1 {
			t.Errorf("%s: %d committed rows and %d runtime.Do runs: more than one committed outcome; answers %+v", desc, rows, doRuns.Load(), answers)
			continue
		}
		if doRuns.Load() == 1 {
			committedO = &order{ID: -1, Ref: "do:" + key, Amount: 10}
		}
		for _, a := range answers {
			if a.err != nil || !a.committed {
				continue
			}
			if committedO == nil || a.o != *committedO {
				t.Errorf("%s: %s committed and was told %+v; the committed outcome is %v; answers %+v", desc, a.who, a.o, committedO, answers)
			}
		}
		t.Logf("%s: rows %d, do runs %d, tx runs %d; answers %+v", desc, rows, doRuns.Load(), runs.Load(), answers)
	}
}

// TestR20ReadOnlyTransaction: DoTx in a READ ONLY transaction whose effect
// only reads: the SUCCESS write inside tx must fail; DoTx must say so and
// leave the key free (nothing was committed), and the caller's transaction
// must stay usable or the error must say it is not.
func TestR20ReadOnlyTransaction(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 10)
	call.Effect = func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
		runs.Add(1)
		var n int
		err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
		return order{ID: int64(n), Ref: r.OrderID, Amount: r.Amount}, err
	}
	tx, err := p.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	o, err := pgstore.DoTx(ctx, rt, tx, call)
	t.Logf("DoTx in a READ ONLY transaction: %+v %v (runs %d)", o, err, runs.Load())
	scope := runtime.ScopeFrom(ctx)
	t.Logf("record: %s", r20Record(t, p, scope, "R20.Create", "k1"))
	_, errSel := tx.Exec(ctx, "SELECT 1")
	t.Logf("SELECT 1 after: %v", errSel)
	if err == nil {
		if errC := tx.Commit(ctx); errC != nil {
			t.Errorf("DoTx succeeded, commit failed: %v", errC)
		}
	} else if errSel != nil && !errors.Is(err, pgstore.ErrRollbackRequired) {
		t.Errorf("DoTx returned %v and the transaction is no longer usable (%v)", err, errSel)
	}
	_ = tx.Rollback(ctx)
	var doRuns atomic.Int32
	var d time.Duration
	var od order
	var errD error
	d = timed(func() { od, errD = doR20Dup(ctx, rt, table, &doRuns, call) })
	t.Logf("duplicate after the transaction ended: %+v %v after %v", od, errD, d.Round(time.Millisecond))
	if err != nil && (errD != nil || doRuns.Load() != 1 || d > r20Quick) {
		t.Errorf("after a failed DoTx and the transaction's end, the key is not free: %+v %v after %v", od, errD, d.Round(time.Millisecond))
	}
}

// TestR20TwiceHolds: DoTx twice in one transaction, same or another
// request, within or past the first call's lease: the same request replays
// what tx holds, another is ErrKeyReused; the caller commits one row.
func TestR20TwiceHolds(t *testing.T) {
	for _, tc := range []struct{ same, past bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		t.Run(fmt.Sprintf("same=%v/past=%v", tc.same, tc.past), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt, _ := r20Runtime(t)
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := r20Call(table, "k1", &runs, 10)
			tx := r20Begin(ctx, t, p)
			first, err := pgstore.DoTx(ctx, rt, tx, call)
			if err != nil {
				t.Fatal(err)
			}
			limit := r20Quick
			if tc.past {
				time.Sleep(r20Lease + 200*time.Millisecond)
				limit = 1500 * time.Millisecond
			}
			second := call
			if !tc.same {
				second = r20Call(table, "k1", &runs, 11)
			}
			var o order
			var err2 error
			d := timed(func() { o, err2 = pgstore.DoTx(ctx, rt, tx, second) })
			t.Logf("second: %+v %v after %v", o, err2, d.Round(time.Millisecond))
			if tc.same && (err2 != nil || o != first) || !tc.same && !errors.Is(err2, runtime.ErrKeyReused) || d > limit {
				t.Errorf("second DoTx: %+v %v after %v", o, err2, d.Round(time.Millisecond))
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 || runs.Load() != 1 {
				t.Errorf("rows %d, runs %d", n, runs.Load())
			}
		})
	}
}

// TestR20AlreadyCancelledSecondCall: DoTx, then DoTx again (same identity,
// and a fresh one) with a context already cancelled: the transaction stays
// usable, the first call's outcome commits, the fresh key stays free.
func TestR20AlreadyCancelledSecondCall(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 10)
	tx := r20Begin(ctx, t, p)
	first, err := pgstore.DoTx(ctx, rt, tx, call)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	o2, err2 := pgstore.DoTx(cctx, rt, tx, call)
	o3, err3 := pgstore.DoTx(cctx, rt, tx, r20Call(table, "k2", &runs, 20))
	t.Logf("cancelled second call: %+v %v; cancelled fresh key: %+v %v", o2, err2, o3, err3)
	if err2 == nil && o2 != first {
		t.Errorf("second call told %+v", o2)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v (DoTx said %v / %v)", err, err2, err3)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table+" WHERE ref = 'k1'"); n != 1 {
		t.Errorf("k1 rows %d", n)
	}
	var doRuns atomic.Int32
	var d time.Duration
	var od order
	var errD error
	d = timed(func() { od, errD = doR20Dup(ctx, rt, table, &doRuns, r20Call(table, "k2", &runs, 20)) })
	if err3 != nil && (errD != nil || d > r20Quick) {
		t.Errorf("k2 after a cancelled DoTx: %+v %v after %v", od, errD, d.Round(time.Millisecond))
	}
}

// TestR20SavepointBetween: DoTx; SAVEPOINT; DoTx again (replays);
// ROLLBACK TO the savepoint; DoTx a third time: the outcome tx holds is
// the first call's, the second and third calls replay it at once.
func TestR20SavepointBetween(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, _ := r20Runtime(t)
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := r20Call(table, "k1", &runs, 10)
	tx := r20Begin(ctx, t, p)
	first, err := pgstore.DoTx(ctx, rt, tx, call)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		var o order
		var err error
		d := timed(func() { o, err = pgstore.DoTx(ctx, rt, tx, call) })
		if err != nil || o != first || d > r20Quick {
			t.Errorf("call %d: %+v %v after %v", i, o, err, d.Round(time.Millisecond))
		}
		if i == 2 {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 || runs.Load() != 1 {
		t.Errorf("rows %d runs %d", n, runs.Load())
	}
}
