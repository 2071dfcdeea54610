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

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r28Pool returns a pool of maxConns on a schema of its own (migrated,
// dropped at the end): nothing here touches the shared public table.
func r28Pool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("r28_%d", time.Now().UnixNano())
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if c, err := pgx.ConnectConfig(context.Background(), cfg.ConnConfig.Copy()); err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	if err := pgstore.Migrate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE r28_orders (id bigserial PRIMARY KEY, ref text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return p
}

type r28Req struct {
	Ref string `json:"ref"`
}

func r28Effect(runs *atomic.Int32) func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
	return func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
		runs.Add(1)
		var id int64
		err := tx.QueryRow(ctx, "INSERT INTO r28_orders (ref) VALUES ($1) RETURNING id", r.Ref).Scan(&id)
		return id, err
	}
}

func r28Rows(t *testing.T, p *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := p.QueryRow(context.Background(), "SELECT count(*) FROM r28_orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The caller keeps its transaction open long past the lease after DoTx
// succeeded; duplicates (runtime.Do and DoTx in other transactions) come
// during it, then it commits. Pools of 2 and 4 connections, group commit
// on and off. Promise: a live caller never loses its claim while its
// transaction is open and will commit; duplicates replay its answer.
func TestR28DoTxLongOpenTxPastLease(t *testing.T) {
	for _, gc := range []bool{false, true} {
		for _, conns := range []int32{2, 3, 6} {
			t.Run(fmt.Sprintf("group=%v/conns=%d", gc, conns), func(t *testing.T) {
				p := r28Pool(t, conns)
				var opts []pgstore.Option
				if gc {
					opts = append(opts, pgstore.WithGroupCommit(0))
				}
				rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(150*time.Millisecond), runtime.WithMaxWait(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				ctx := runtime.WithScope(context.Background(), "r28")
				var runs atomic.Int32
				call := pgstore.TxCall[r28Req, int64]{Operation: "r28.long", Key: "k", Request: r28Req{"a"}, Effect: r28Effect(&runs)}
				tx, err := p.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				mine, err := pgstore.DoTx(ctx, rt, tx, call)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var dupErrs [2]error
				var dupResp [2]int64
				wg.Add(2)
				go func() {
					defer wg.Done()
					dupResp[0], dupErrs[0] = runtime.Do(ctx, rt, runtime.Call[r28Req, int64]{Operation: "r28.long", Key: "k", Request: r28Req{"a"},
						Effect: func(context.Context, r28Req) (int64, error) { runs.Add(1); return -1, nil }})
				}()
				go func() {
					defer wg.Done()
					tx2, err := p.Begin(ctx)
					if err != nil {
						dupErrs[1] = err
						return
					}
					dupResp[1], dupErrs[1] = pgstore.DoTx(ctx, rt, tx2, call)
					if err := tx2.Commit(ctx); err != nil && dupErrs[1] == nil {
						dupErrs[1] = err
					}
				}()
				time.Sleep(1200 * time.Millisecond) // eight leases
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				t.Logf("mine %d; duplicates %v %v / %v %v; runs %d; rows %d", mine, dupResp[0], dupErrs[0], dupResp[1], dupErrs[1], runs.Load(), r28Rows(t, p))
				if n := r28Rows(t, p); n != 1 || runs.Load() != 1 {
					t.Fatalf("rows %d, effect runs %d; want 1 and 1", n, runs.Load())
				}
				for i, e := range dupErrs {
					if e == nil && dupResp[i] != mine {
						t.Fatalf("duplicate %d got %d, want %d", i, dupResp[i], mine)
					}
				}
			})
		}
	}
}

// A savepoint of the caller's around DoTx, rolled back; the transaction
// stays open past the lease; a duplicate in another transaction takes the
// claim over (the caller's outcome is gone); the caller calls DoTx again in
// its transaction and both commit. Promise: the effect's code runs once per
// committed outcome plus once per rollback, and one row commits.
func TestR28DoTxSavepointRolledBackThenBothCommit(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%v", gc), func(t *testing.T) {
			p := r28Pool(t, 4)
			var opts []pgstore.Option
			if gc {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(150*time.Millisecond), runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r28")
			var runs atomic.Int32
			call := pgstore.TxCall[r28Req, int64]{Operation: "r28.sp", Key: "k", Request: r28Req{"a"}, Effect: r28Effect(&runs)}
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pgstore.DoTx(ctx, rt, sp, call); err != nil {
				t.Fatal(err)
			}
			if err := sp.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var dup int64
			go func() {
				tx2, err := p.Begin(ctx)
				if err != nil {
					done <- err
					return
				}
				dup, err = pgstore.DoTx(ctx, rt, tx2, call)
				time.Sleep(300 * time.Millisecond) // holds its outcome a while
				done <- errors.Join(err, tx2.Commit(ctx))
			}()
			time.Sleep(100 * time.Millisecond)
			again, err := pgstore.DoTx(ctx, rt, tx, call)
			t.Logf("caller again: %d, %v", again, err)
			cerr := tx.Commit(ctx)
			derr := <-done
			t.Logf("dup: %d, %v; caller commit: %v; runs %d; rows %d", dup, derr, cerr, runs.Load(), r28Rows(t, p))
			if n := r28Rows(t, p); n != 1 {
				t.Fatalf("rows %d, want 1", n)
			}
			if err == nil && derr == nil && again != dup {
				t.Fatalf("the caller got %d, the duplicate %d: one outcome", again, dup)
			}
		})
	}
}

// The caller's connection is killed (pg_terminate_backend) at each step:
// while the effect runs, after DoTx returned before the commit. A duplicate
// DoTx in another transaction waits meanwhile. Promise: one row commits,
// the killed caller is never told a success whose transaction then
// commits, and the duplicate is not held for the lease once the caller's
// transaction is gone.
func TestR28DoTxCallerBackendKilled(t *testing.T) {
	for _, step := range []string{"in-effect", "after-return"} {
		for _, gc := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/group=%v", step, gc), func(t *testing.T) {
				p := r28Pool(t, 5)
				var opts []pgstore.Option
				if gc {
					opts = append(opts, pgstore.WithGroupCommit(0))
				}
				rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(2*time.Second), runtime.WithMaxWait(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				ctx := runtime.WithScope(context.Background(), "r28")
				var runs atomic.Int32
				inEffect := make(chan int32, 1)
				proceed := make(chan struct{})
				effect := func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
					n := runs.Add(1)
					var pid int32
					if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
						return 0, err
					}
					if n == 1 {
						inEffect <- pid
						if step == "in-effect" {
							<-proceed
						}
					}
					var id int64
					err := tx.QueryRow(ctx, "INSERT INTO r28_orders (ref) VALUES ($1) RETURNING id", r.Ref).Scan(&id)
					return id, err
				}
				call := pgstore.TxCall[r28Req, int64]{Operation: "r28.kill", Key: "k", Request: r28Req{"a"}, Effect: effect}
				type res struct {
					v         int64
					err, cerr error
				}
				first := make(chan res, 1)
				go func() {
					tx, err := p.Begin(ctx)
					if err != nil {
						first <- res{err: err}
						return
					}
					v, err := pgstore.DoTx(ctx, rt, tx, call)
					if step == "after-return" {
						<-proceed
					}
					first <- res{v, err, tx.Commit(ctx)}
				}()
				pid := <-inEffect
				dupDone := make(chan res, 1)
				dupStart := time.Now()
				go func() {
					tx2, err := p.Begin(ctx)
					if err != nil {
						dupDone <- res{err: err}
						return
					}
					v, err := pgstore.DoTx(ctx, rt, tx2, call)
					dupDone <- res{v, err, tx2.Commit(ctx)}
				}()
				time.Sleep(100 * time.Millisecond)
				if _, err := p.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
					t.Fatal(err)
				}
				killed := time.Now()
				close(proceed)
				f := <-first
				d := <-dupDone
				t.Logf("first: %d, %v, commit %v; dup: %d, %v, commit %v (%v after the kill, %v after it started); runs %d; rows %d",
					f.v, f.err, f.cerr, d.v, d.err, d.cerr, time.Since(killed).Round(time.Millisecond), time.Since(dupStart).Round(time.Millisecond), runs.Load(), r28Rows(t, p))
				if n := r28Rows(t, p); n != 1 {
					t.Fatalf("rows %d, want 1", n)
				}
				if f.err == nil && f.cerr == nil && d.err == nil && d.v != f.v {
					t.Fatalf("both committed: %d and %d", f.v, d.v)
				}
			})
		}
	}
}

// A mixed schedule on few keys: DoTx callers that commit, roll back, roll
// back a savepoint around DoTx and commit, or hold their transaction past
// the lease; runtime.Do duplicates whose effect inserts on its own
// (autocommit). Group commit on and off, a pool of 24. Promises: at most one
// row per key; every caller told a success whose answer stands (a DoTx
// whose transaction committed with it, a runtime.Do) was told the
// committed row.
func TestR28DoTxMixedSchedule(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%v", gc), func(t *testing.T) {
			p := r28Pool(t, 24)
			var opts []pgstore.Option
			if gc {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithLease(100*time.Millisecond), runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r28")
			const keys, per = 5, 5
			type told struct {
				key   string
				v     int64
				kind  string
				stand bool // the answer must be the committed row
			}
			var mu sync.Mutex
			var answers []told
			var wg sync.WaitGroup
			for k := 0; k < keys; k++ {
				key := fmt.Sprint("k", k)
				for c := 0; c < per; c++ {
					wg.Add(1)
					go func(kind int) {
						defer wg.Done()
						time.Sleep(time.Duration((kind*37+k*11)%50) * time.Millisecond)
						call := pgstore.TxCall[r28Req, int64]{Operation: "r28.mixed", Key: key, Request: r28Req{key},
							Effect: func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
								var id int64
								err := tx.QueryRow(ctx, "INSERT INTO r28_orders (ref) VALUES ($1) RETURNING id", r.Ref).Scan(&id)
								return id, err
							}}
						record := func(v int64, name string, stand bool) {
							mu.Lock()
							answers = append(answers, told{key, v, name, stand})
							mu.Unlock()
						}
						switch kind {
						case 0, 1, 3: // commit, roll back, hold past the lease then commit
							tx, err := p.Begin(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							v, err := pgstore.DoTx(ctx, rt, tx, call)
							if kind == 3 {
								time.Sleep(250 * time.Millisecond)
							}
							if kind == 1 || err != nil {
								_ = tx.Rollback(ctx)
								return
							}
							if cerr := tx.Commit(ctx); cerr == nil {
								record(v, "dotx-commit", true)
							}
						case 2: // a savepoint around DoTx rolled back, then commit
							tx, err := p.Begin(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							sp, err := tx.Begin(ctx)
							if err == nil {
								_, _ = pgstore.DoTx(ctx, rt, sp, call)
								_ = sp.Rollback(ctx)
							}
							_ = tx.Commit(ctx)
						case 4: // runtime.Do, its effect autocommits
							v, err := runtime.Do(ctx, rt, runtime.Call[r28Req, int64]{Operation: "r28.mixed", Key: key, Request: r28Req{key},
								Effect: func(ctx context.Context, r r28Req) (int64, error) {
									var id int64
									err := p.QueryRow(ctx, "INSERT INTO r28_orders (ref) VALUES ($1) RETURNING id", r.Ref).Scan(&id)
									return id, err
								}})
							if err == nil {
								record(v, "do", true)
							} else {
								t.Logf("runtime.Do %s: %v", key, err)
							}
						}
					}(c)
				}
			}
			wg.Wait()
			rows, err := p.Query(ctx, "SELECT ref, count(*), min(id) FROM r28_orders GROUP BY ref")
			if err != nil {
				t.Fatal(err)
			}
			committed := map[string]int64{}
			for rows.Next() {
				var ref string
				var n, id int64
				if err := rows.Scan(&ref, &n, &id); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Errorf("key %s: %d rows committed", ref, n)
				}
				committed[ref] = id
			}
			rows.Close()
			for _, a := range answers {
				if a.stand && committed[a.key] != a.v {
					t.Errorf("key %s: %s was told %d, the committed row is %d", a.key, a.kind, a.v, committed[a.key])
				}
			}
			t.Logf("%d answers that stand; committed %v", len(answers), committed)
		})
	}
}

// docs/reliability.md, "The rules every door keeps", Classification: "A
// timeout anywhere in an error's tree or a cancellation ... is UNKNOWN
// whatever the error policy and whatever Permanent or Retryable says"; the
// doors are runtime.Do, generated wrappers (a method whose effect is local
// is generated as pgstore.DoTx), idemhttp, idemgrpc, and DoTx through
// runtime.DoLocal, where "any other error, a timeout included, releases
// the claim".
//
// Schedule: the effect's statement runs out of time (its context's
// deadline) and the effect wraps what it got as a permanent failure
// (runtime.Permanent(fmt.Errorf("charging: %w", err)), as code that marks
// every failure of one step permanent does). runtime.Do classifies it
// UNKNOWN (the timeout wins). DoTx records FAILED, committed on its own:
// every retry for the TTL replays a permanent failure of an attempt that
// only timed out, whose writes were rolled back (nothing happened).
func TestR28DoTxPermanentTimeoutRecordedFailed(t *testing.T) {
	p := r28Pool(t, 4)
	st := pgstore.New(p)
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r28")
	timedOut := func() error { return runtime.Permanent(fmt.Errorf("charging: %w", context.DeadlineExceeded)) }

	// runtime.Do, the same error: UNKNOWN.
	_, derr := runtime.Do(ctx, rt, runtime.Call[r28Req, int64]{Operation: "r28.permtimeout.do", Key: "k", Request: r28Req{"a"},
		Effect: func(context.Context, r28Req) (int64, error) { return 0, timedOut() }})
	drec, _ := st.Get(ctx, runtime.Identity{Scope: "r28", Operation: "r28.permtimeout.do", Key: "k"})
	t.Logf("runtime.Do: %v; record %s", derr, drec.State)

	var runs atomic.Int32
	call := pgstore.TxCall[r28Req, int64]{Operation: "r28.permtimeout", Key: "k", Request: r28Req{"a"},
		Effect: func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
			runs.Add(1)
			if _, err := tx.Exec(ctx, "INSERT INTO r28_orders (ref) VALUES ($1)", r.Ref); err != nil {
				return 0, err
			}
			if runs.Load() == 1 {
				return 0, timedOut()
			}
			return 7, nil
		}}
	for i := 0; i < 2; i++ {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := pgstore.DoTx(ctx, rt, tx, call)
		cerr := tx.Commit(ctx)
		rec, gerr := st.Get(ctx, runtime.Identity{Scope: "r28", Operation: "r28.permtimeout", Key: "k"})
		t.Logf("DoTx %d: %d, %v (commit %v); record %s %v; effect runs %d; rows %d", i+1, v, err, cerr, rec.State, gerr, runs.Load(), r28Rows(t, p))
	}
	if drec.State != runtime.StateUnknown {
		t.Fatalf("runtime.Do recorded %s for a timeout marked permanent; the rule says UNKNOWN", drec.State)
	}
	if runs.Load() != 2 || r28Rows(t, p) != 1 {
		t.Fatalf("a DoTx attempt that timed out (marked permanent) was recorded FAILED: its retry replayed the failure (effect runs %d, rows %d) though nothing happened; a timeout anywhere in the error's tree is never a permanent failure, whatever Permanent says, and DoTx releases the claim after a timeout", runs.Load(), r28Rows(t, p))
	}
}
