//go:build idemattack

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
	"github.com/idemkit/idem/runtime/pgstore"
)

// atkRecord reads the raw record row (state, version, xact status, lease left).
func atkRecord(t *testing.T, p *pgxpool.Pool, scope, op, key string) string {
	t.Helper()
	var s string
	err := p.QueryRow(context.Background(), `SELECT format('state=%s v=%s xact=%s xstatus=%s lease_left=%s fp=%s',
		state, version, xact, pg_xact_status(xact), lease_expires_at - clock_timestamp(), encode(substr(fingerprint,1,4),'hex'))
		FROM idem_records WHERE scope=$1 AND operation=$2 AND key=$3`, scope, op, key).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// doDup is a runtime.Do duplicate whose effect inserts a business row
// through the pool (its own committed write).
func doDup(ctx context.Context, rt *runtime.Runtime, p *pgxpool.Pool, table string, runs *atomic.Int32, call pgstore.TxCall[orderReq, order]) (order, error) {
	return runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: call.Operation, Key: call.Key, Request: call.Request,
		Effect: func(ctx context.Context, r orderReq) (order, error) {
			runs.Add(1)
			var o order
			err := p.QueryRow(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2) RETURNING id, ref, amount", "do:"+r.OrderID, r.Amount).
				Scan(&o.ID, &o.Ref, &o.Amount)
			return o, err
		}})
}

func txDup(ctx context.Context, rt *runtime.Runtime, p *pgxpool.Pool, call pgstore.TxCall[orderReq, order]) (order, error) {
	var o order
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		o, err = pgstore.DoTx(ctx, rt, tx, call)
		return err
	})
	return o, err
}

// Attack 1 (REPEATABLE READ / SERIALIZABLE with DoTx as the first
// statement) is TestDoTxIsolationIsRefused now.

// Attack 2: a savepoint around DoTx is rolled back after DoTx succeeded,
// the caller's transaction stays open a while, then commits. Duplicates
// (DoTx and runtime.Do) wait meanwhile. Exactly one effect must commit and
// every answered duplicate must get that one's answer.
func TestAttackSavepointRollbackAroundDoTx(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(400*time.Millisecond), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs, doRuns atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	var wg sync.WaitGroup
	type res struct {
		who string
		o   order
		err error
	}
	results := make(chan res, 8)
	var firstResp order
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		firstResp, err = pgstore.DoTx(ctx, rt, sp, call)
		if err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		// duplicates while the caller's transaction is open
		for i := range 3 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				o, err := txDup(ctx, rt, p, call)
				results <- res{fmt.Sprint("dotx", i), o, err}
			}()
			go func() {
				defer wg.Done()
				o, err := doDup(ctx, rt, p, table, &doRuns, call)
				results <- res{fmt.Sprint("do", i), o, err}
			}()
		}
		time.Sleep(time.Second) // past the claim's lease
		t.Logf("record while open after savepoint rollback: %s", atkRecord(t, p, runtime.ScopeFrom(ctx), "Orders.Create", "o-1"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	var answers []order
	for r := range results {
		t.Logf("%s: %+v %v", r.who, r.o, r.err)
		if r.err == nil {
			answers = append(answers, r.o)
		} else if !errors.Is(r.err, runtime.ErrInProgress) {
			t.Errorf("%s: %v", r.who, r.err)
		}
	}
	rows := count(t, p, "SELECT count(*) FROM "+table)
	t.Logf("first (rolled back) resp %+v; effect runs %d (DoTx) + %d (Do); rows %d", firstResp, runs.Load(), doRuns.Load(), rows)
	if rows != 1 {
		t.Errorf("%d business rows, want 1", rows)
	}
	for _, a := range answers {
		if a != answers[0] {
			t.Errorf("answers differ: %+v vs %+v", a, answers[0])
		}
	}
}

// Attack 3: the caller's transaction stays open long after DoTx succeeded
// (SUCCESS written, uncommitted), far past the tiny lease; DoTx and Do
// duplicates and a reconciler (the operation registered, its query saying
// "not happened") run meanwhile. Nobody may run the effect again or
// converge the record; after the commit everyone replays.
func TestAttackLeaseExpiresWhileRowHeld(t *testing.T) {
	p := testPool(t)
	opName := fmt.Sprintf("Atk3.Create.%d", time.Now().UnixNano())
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(30*time.Millisecond), runtime.WithMaxWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var queried atomic.Int32
	if err := runtime.Register(rt, opName, func(ctx context.Context, r orderReq) (order, runtime.Outcome, error) {
		queried.Add(1)
		return order{}, runtime.OutcomeNotHappened, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err := runtime.NewReconciler(rt, runtime.ReconcileLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs, doRuns atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: opName, Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	var first order
	var dupErrs []string
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		first, err = pgstore.DoTx(ctx, rt, tx, call)
		if err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // lease long expired
		t.Logf("record while open: %s", atkRecord(t, p, runtime.ScopeFrom(ctx), opName, "o-1"))
		st, rerr := rec.RunOnce(ctx)
		t.Logf("reconciler pass while open: %+v %v", st, rerr)
		start := time.Now()
		_, e1 := txDup(ctx, rt, p, call)
		d1 := time.Since(start)
		start = time.Now()
		_, e2 := doDup(ctx, rt, p, table, &doRuns, call)
		d2 := time.Since(start)
		dupErrs = append(dupErrs, fmt.Sprintf("DoTx dup: %v after %v", e1, d1.Round(time.Millisecond)), fmt.Sprintf("Do dup: %v after %v", e2, d2.Round(time.Millisecond)))
		for _, e := range []error{e1, e2} {
			if !errors.Is(e, runtime.ErrInProgress) {
				t.Errorf("duplicate while the row is held: %v, want ErrInProgress", e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range dupErrs {
		t.Log(s)
	}
	o1, e1 := txDup(ctx, rt, p, call)
	o2, e2 := doDup(ctx, rt, p, table, &doRuns, call)
	if e1 != nil || e2 != nil || o1 != first || o2 != first {
		t.Errorf("after commit: %+v %v / %+v %v, want %+v", o1, e1, o2, e2, first)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 || runs.Load() != 1 || doRuns.Load() != 0 {
		t.Errorf("rows %d, DoTx runs %d, Do runs %d", n, runs.Load(), doRuns.Load())
	}
	t.Logf("query asked %d times", queried.Load())
}

// Attack 4: the renewals are starved (a side transaction holds the record's
// row lock) while the effect runs longer than the lease; then the lock goes
// and a duplicate DoTx, polling, races the original's SUCCESS write.
func TestAttackStarvedRenewals(t *testing.T) {
	for _, releaseBeforeEffectEnds := range []bool{true, false} {
		t.Run(fmt.Sprint("releaseBeforeEffectEnds=", releaseBeforeEffectEnds), func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			const lease = 60 * time.Millisecond
			rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			dupDone := make(chan error, 1)
			var dupResp order
			var call pgstore.TxCall[orderReq, order]
			call = pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
				Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					if runs.Load() > 0 { // the duplicate's run
						return insertOrder(table, &runs)(ectx, tx, r)
					}
					o, err := insertOrder(table, &runs)(ectx, tx, r)
					if err != nil {
						return o, err
					}
					side, err := p.Begin(context.Background())
					if err != nil {
						return o, err
					}
					if _, err := side.Exec(context.Background(), "SELECT 1 FROM idem_records WHERE scope=$1 FOR UPDATE", runtime.ScopeFrom(ctx)); err != nil {
						return o, err
					}
					go func() { var err error; dupResp, err = txDup(ctx, rt, p, call); dupDone <- err }()
					if releaseBeforeEffectEnds {
						time.Sleep(5 * lease)
						_ = side.Commit(context.Background())
						time.Sleep(5 * lease)
					} else {
						go func() { time.Sleep(10 * lease); _ = side.Commit(context.Background()) }()
						time.Sleep(5 * lease)
					}
					return o, nil // ignores ectx, like a careless effect
				}}
			var first order
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				first, err = pgstore.DoTx(ctx, rt, tx, call)
				return err
			})
			derr := <-dupDone
			rows := count(t, p, "SELECT count(*) FROM "+table)
			t.Logf("first: %+v %v (LeaseLost=%v); dup: %+v %v; rows %d; runs %d; record %s", first, err, errors.Is(err, runtime.ErrLeaseLost),
				dupResp, derr, rows, runs.Load(), atkRecord(t, p, runtime.ScopeFrom(ctx), "Orders.Create", "o-1"))
			committed := 0
			if err == nil {
				committed++
			}
			if derr == nil {
				committed++
			}
			if rows != 1 {
				t.Errorf("%d business rows, want 1", rows)
			}
			if err != nil && derr != nil {
				t.Errorf("nobody succeeded")
			}
			if err == nil && derr == nil && first != dupResp {
				t.Errorf("two different successes: %+v vs %+v", first, dupResp)
			}
		})
	}
}

// Attack 5: the caller's connection is killed (pg_terminate_backend) at
// two points: inside the effect (after its write), and after DoTx
// returned, before the commit. DoTx must not claim success for writes
// that died; a duplicate must take over at once and commit once.
func TestAttackTerminateBackend(t *testing.T) {
	for _, point := range []string{"in-effect", "after-dotx"} {
		t.Run(point, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			rt, err := runtime.New(pgstore.New(p), runtime.WithLease(10*time.Second), runtime.WithMaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			kill := func(tx pgx.Tx) {
				var pid int
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					t.Error(err)
					return
				}
				if _, err := p.Exec(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pid); err != nil {
					t.Error(err)
				}
			}
			first := true
			call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5},
				Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					o, err := insertOrder(table, &runs)(ectx, tx, r)
					if first && point == "in-effect" && err == nil {
						first = false
						kill(tx)
					}
					return o, err
				}}
			var dotxErr error
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, dotxErr = pgstore.DoTx(ctx, rt, tx, call)
				if dotxErr == nil && point == "after-dotx" {
					first = false
					kill(tx)
				}
				return dotxErr
			})
			t.Logf("DoTx: %v (RollbackRequired=%v); tx: %v; record: %s", dotxErr, errors.Is(dotxErr, pgstore.ErrRollbackRequired), err,
				atkRecord(t, p, runtime.ScopeFrom(ctx), "Orders.Create", "o-1"))
			if err == nil {
				t.Fatalf("the transaction committed after its backend was killed?")
			}
			start := time.Now()
			o, derr := txDup(ctx, rt, p, call)
			t.Logf("duplicate: %+v %v after %v", o, derr, time.Since(start).Round(time.Millisecond))
			if derr != nil {
				t.Errorf("duplicate after the killed transaction: %v", derr)
			}
			if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
				t.Errorf("%d rows, want 1", n)
			}
		})
	}
}

// Attack 6: the caller's context is cancelled while the SUCCESS
// compare-and-set waits on a row lock (a side transaction holds the
// record's row). The caller must not be told success, and whatever it is
// told must be consistent with what commits.
func TestAttackCancelDuringSuccessCAS(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	s := pgstore.New(p)
	rt, err := runtime.New(s, runtime.WithLease(10*time.Second), runtime.WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	base := scopedCtx(t.Name())
	ctx, cancel := context.WithCancel(base)
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	var side pgx.Tx
	pgstore.SetBeforeSuccess(s, func() {
		pgstore.SetBeforeSuccess(s, nil)
		var err error
		side, err = p.Begin(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := side.Exec(context.Background(), "SELECT 1 FROM idem_records WHERE scope=$1 FOR UPDATE", runtime.ScopeFrom(base)); err != nil {
			t.Error(err)
		}
		time.AfterFunc(200*time.Millisecond, cancel)
		time.AfterFunc(600*time.Millisecond, func() { _ = side.Commit(context.Background()) })
	})
	var dotxErr error
	var commitErr error
	tx, err := p.Begin(base)
	if err != nil {
		t.Fatal(err)
	}
	_, dotxErr = pgstore.DoTx(ctx, rt, tx, call)
	if dotxErr == nil {
		commitErr = tx.Commit(base)
	} else {
		// a caller that logs the error and commits the rest of its work,
		// unless told it must roll back
		if errors.Is(dotxErr, pgstore.ErrRollbackRequired) {
			commitErr = tx.Rollback(base)
		} else {
			commitErr = tx.Commit(base)
		}
	}
	time.Sleep(700 * time.Millisecond)
	t.Logf("DoTx: %v (RollbackRequired=%v); commit/rollback: %v; rows %d; record %s", dotxErr, errors.Is(dotxErr, pgstore.ErrRollbackRequired),
		commitErr, count(t, p, "SELECT count(*) FROM "+table), atkRecord(t, p, runtime.ScopeFrom(base), "Orders.Create", "o-1"))
	o, derr := txDup(base, rt, p, call)
	t.Logf("duplicate: %+v %v", o, derr)
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	if dotxErr == nil && commitErr == nil && (derr != nil || o.Ref != "o-1") {
		t.Errorf("told success, but the duplicate got %+v %v", o, derr)
	}
}

// Attack 7: after a DoTx whose caller rolled back, a retry of the same key
// with a corrected payload. The docs: "nothing remains of the effect" and
// the next duplicate takes the claim over at once.
func TestAttackKeyAfterRollbackOtherPayload(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(50*time.Millisecond), runtime.WithMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
			t.Fatal(err)
		}
		return errors.New("validation failed later: roll back")
	})
	time.Sleep(200 * time.Millisecond)
	if _, err := rt.Store().Sweep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	call.Request.Amount = 6
	o, err := txDup(ctx, rt, p, call)
	t.Logf("retry with another payload after rollback (+lease, +sweep): %+v %v (KeyReused=%v); record %s", o, err,
		errors.Is(err, runtime.ErrKeyReused), atkRecord(t, p, runtime.ScopeFrom(ctx), "Orders.Create", "o-1"))
}

// atkPool is a pool of its own (n connections) on the test database.
func atkPool(t *testing.T, n int32) *pgxpool.Pool {
	t.Helper()
	testPool(t)
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	pp, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pp.Close)
	return pp
}

// Attack 8: the original's store becomes unreachable for its renewals
// (its own pool is exhausted) while the effect runs past the lease; a
// duplicate through another store (another process) takes the claim over
// with no lock in its way and runs the effect in its own transaction.
// Variants: the duplicate's transaction commits at once, or stays open
// (SUCCESS written, row locked) while the original tries its SUCCESS
// compare-and-set; then commits or rolls back.
func TestAttackTakeoverWhileOriginalRuns(t *testing.T) {
	for _, dupEnd := range []string{"commit-at-once", "hold-then-commit", "hold-then-rollback"} {
		t.Run(dupEnd, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			const lease = 90 * time.Millisecond
			sp := atkPool(t, 2)
			s1 := pgstore.New(sp)
			rt1, err := runtime.New(s1, runtime.WithLease(lease), runtime.WithMaxWait(2*time.Second), runtime.WithOwner("orig"))
			if err != nil {
				t.Fatal(err)
			}
			rt2, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(2*time.Second), runtime.WithOwner("dup"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			var origStart, origReturned time.Time
			dupDone := make(chan error, 1)
			var dupResp order
			var casWait time.Duration
			orig := pgstore.TxCall[orderReq, order]{Operation: "Atk8", Key: "o-1", Request: orderReq{"o-1", 5},
				Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					origStart = time.Now()
					o, err := insertOrder(table, &runs)(ectx, tx, r)
					if err != nil {
						return o, err
					}
					// the store becomes unreachable: hold its pool
					c1, err := sp.Acquire(context.Background())
					if err != nil {
						return o, err
					}
					c2, err := sp.Acquire(context.Background())
					if err != nil {
						return o, err
					}
					go func() {
						dupDone <- pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
							var err error
							dupResp, err = pgstore.DoTx(ctx, rt2, tx, pgstore.TxCall[orderReq, order]{Operation: "Atk8", Key: "o-1", Request: r,
								Effect: insertOrder(table, &runs)})
							if err != nil {
								return err
							}
							switch dupEnd {
							case "hold-then-commit":
								time.Sleep(6 * lease)
							case "hold-then-rollback":
								time.Sleep(6 * lease)
								return errors.New("dup rolls back")
							}
							return nil
						})
					}()
					time.Sleep(4 * lease)
					c1.Release()
					c2.Release()
					origReturned = time.Now()
					return o, nil // a careless effect: ignores ectx
				}}
			var first order
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				first, err = pgstore.DoTx(ctx, rt1, tx, orig)
				casWait = time.Since(origReturned)
				return err
			})
			derr := <-dupDone
			rows := count(t, p, "SELECT count(*) FROM "+table)
			t.Logf("orig: %+v %v (LeaseLost=%v) took %v, %v after its effect returned; dup: %+v %v; rows %d; effect runs %d; record %s",
				first, err, errors.Is(err, runtime.ErrLeaseLost), time.Since(origStart).Round(time.Millisecond), casWait.Round(time.Millisecond),
				dupResp, derr, rows, runs.Load(), atkRecord(t, p, runtime.ScopeFrom(ctx), "Atk8", "o-1"))
			want := 1
			if dupEnd == "hold-then-rollback" && err != nil {
				want = 0
			}
			if rows != want {
				t.Errorf("%d business rows, want %d", rows, want)
			}
			if err == nil && derr == nil {
				t.Errorf("both told success")
			}
			// after all: a retry must replay or run exactly to one row
			o, rerr := txDup(ctx, rt2, p, pgstore.TxCall[orderReq, order]{Operation: "Atk8", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)})
			rows = count(t, p, "SELECT count(*) FROM "+table)
			t.Logf("final retry: %+v %v; rows %d", o, rerr, rows)
			if rows != 1 || rerr != nil {
				t.Errorf("final: rows %d, retry %v", rows, rerr)
			}
		})
	}
}

// Attack 9 (documented bounds): a DoTx duplicate of a call whose
// transaction is open (SUCCESS written) and whose claim's lease is still
// live. README: "a DoTx duplicate is told ErrInProgress at once"; DoTx's
// doc: it waits up to MaxWait while the lease is live, then about half a
// second while the row is held.
func TestAttackDoTxDuplicateWaitBound(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	for _, lease := range []time.Duration{time.Minute, 150 * time.Millisecond} {
		rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(400*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := scopedCtx(t.Name())
		var runs atomic.Int32
		call := pgstore.TxCall[orderReq, order]{Operation: "Atk9", Key: "o-1", Request: orderReq{"o-1", 5}, Effect: insertOrder(table, &runs)}
		_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			if _, err := pgstore.DoTx(ctx, rt, tx, call); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := txDup(ctx, rt, p, call)
			t.Logf("lease %v, MaxWait 400ms: DoTx duplicate answered after %v: %v", lease, time.Since(start).Round(time.Millisecond), err)
			return nil
		})
	}
}
