package pgstore_test

// Adversarial review 19 of group commit's lock_timeout (GroupSet sets it
// with set_config(..., true) for its own statement): the setting must never
// reach another statement on the same pooled connection (a user's
// statement, a user's transaction, DoTx), and a batch that fails on it must
// still give each caller its own outcome.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r19SmallPool is a pool of n connections on the test database, each in
// query mode mode, so that the store's batches and the test's own
// statements share connections.
func r19SmallPool(t *testing.T, n int32, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	testPool(t) // migrated
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = n, n
	cfg.ConnConfig.DefaultQueryExecMode = mode
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// r19Settings reads lock_timeout on every connection of p at once (all of
// them acquired, so each is read).
func r19Settings(t *testing.T, p *pgxpool.Pool) []string {
	t.Helper()
	ctx := context.Background()
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var out []string
	for range p.Config().MaxConns {
		c, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var v string
		if err := c.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// Promise (queries/group.sql): "set_config(..., true) sets it for the
// statement's own (implicit) transaction only". Attack: batches that fail
// on the lock wait (r18StuckBatch's schedule, and a batch that completes
// normally) on a pool of two connections, in each query mode pgx offers;
// then every connection of the pool is read, a user's statement waits
// 600 ms on a row lock, and DoTx runs an effect that waits 600 ms on a row
// lock inside the caller's transaction. None may see lock_timeout 200ms
// or fail with lock_not_available.
func TestReview19GroupLockTimeoutDoesNotLeak(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			p := r19SmallPool(t, 2, mode)
			s := pgstore.New(p, pgstore.WithGroupCommit(0))
			scope := fmt.Sprintf("r19-leak/%s/%d", mode, time.Now().UnixNano())
			k := runtime.Identity{Scope: scope, Operation: "R19.K", Key: "K"}
			unlock, first := r18StuckBatch(t, s, scope, k)
			time.Sleep(400 * time.Millisecond) // past the batch's 200 ms lock wait
			unlock()
			if f := <-first; f.err != nil || !f.res.Claimed {
				t.Fatalf("the first claim: %+v %v", f.res, f.err)
			}
			if _, _, failed := s.GroupCommitStats(); failed == 0 {
				t.Logf("warning: no batch failed on its lock wait; the schedule did not arise")
			}
			// Then batches that commit: a burst of claims queued together.
			b0, st0, _ := s.GroupCommitStats()
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := runtime.Identity{Scope: scope, Operation: "R19.B", Key: fmt.Sprint(i)}
					if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "b", Lease: time.Hour}); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if b, st, _ := s.GroupCommitStats(); st-st0 <= b-b0 {
				t.Logf("warning: the burst sent no batch of two or more")
			}
			for i, v := range r19Settings(t, p) {
				if v != "0" {
					t.Errorf("connection %d of the store's pool: lock_timeout = %q after group commit, want the default 0", i, v)
				}
			}

			// A user's statement on the pool waits on a row lock past 200 ms.
			rowKey := runtime.Identity{Scope: scope, Operation: "R19.ROW", Key: "R"}
			if _, err := s.Claim(ctx, runtime.ClaimParams{ID: rowKey, Fingerprint: []byte("fp"), Owner: "w", Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
			for _, how := range []string{"statement", "transaction", "dotx"} {
				unlockRow := r18Lock(t, testPool(t), rowKey)
				time.AfterFunc(600*time.Millisecond, unlockRow)
				var err error
				start := time.Now()
				switch how {
				case "statement":
					_, err = p.Exec(ctx, `SELECT 1 FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3 FOR UPDATE`,
						rowKey.Scope, rowKey.Operation, rowKey.Key)
				case "transaction":
					err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `SELECT 1 FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3 FOR UPDATE`,
							rowKey.Scope, rowKey.Operation, rowKey.Key)
						return err
					})
				case "dotx":
					rt, rerr := runtime.New(s, runtime.WithOwner("tx"))
					if rerr != nil {
						t.Fatal(rerr)
					}
					err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
						_, err := pgstore.DoTx(runtime.WithScope(ctx, scope), rt, tx, pgstore.TxCall[string, string]{
							Operation: "R19.TX", Key: "T", Request: "r",
							Effect: func(ctx context.Context, tx pgx.Tx, _ string) (string, error) {
								_, err := tx.Exec(ctx, `SELECT 1 FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3 FOR UPDATE`,
									rowKey.Scope, rowKey.Operation, rowKey.Key)
								return "ok", err
							}})
						return err
					})
				}
				var pe *pgconn.PgError
				switch {
				case errors.As(err, &pe) && pe.Code == "55P03":
					t.Errorf("%s after group commit: lock_not_available after %v: the batch's lock_timeout leaked", how, time.Since(start).Round(time.Millisecond))
				case err != nil:
					t.Errorf("%s: %v", how, err)
				}
				unlockRow()
			}
		})
	}
}

// Promise (README, group commit): a batch that fails as a whole commits
// nothing and "each of its callers runs its own statement", so each caller
// gets its own outcome. Attack, seeded: 24 callers on a pool of 3, each
// claiming then completing a key; rows of a third of the keys are locked
// by the test for 250-450 ms just after their claim, so batches carrying
// their completions fail on the 200 ms lock wait. Every caller must be
// answered with its own version (no error, no ErrLeaseLost), and the
// records must end SUCCESS with the caller's response.
func TestReview19GroupLockTimeoutOwnOutcomes(t *testing.T) {
	ctx := context.Background()
	p := r19SmallPool(t, 3, pgx.QueryExecModeCacheStatement)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	scope := fmt.Sprintf("r19-own/%d", time.Now().UnixNano())
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := runtime.Identity{Scope: scope, Operation: "R19.O", Key: fmt.Sprint(i)}
			res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: fmt.Sprint("w", i), Lease: time.Hour})
			if err != nil || !res.Claimed {
				errs <- fmt.Errorf("claim %d: %+v %v", i, res.Record, err)
				return
			}
			if i%3 == 0 {
				unlock := r18Lock(t, testPool(t), id)
				time.AfterFunc(time.Duration(250+(i*37)%200)*time.Millisecond, unlock)
			}
			v, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess,
				Owner: res.Record.Owner, Version: res.Record.Version, Response: []byte(fmt.Sprintf(`"r%d"`, i)), TTL: time.Hour,
				Token: fmt.Sprint("tok", i)})
			if err != nil {
				errs <- fmt.Errorf("completion %d: %v", i, err)
				return
			}
			rec, err := s.Get(ctx, id)
			if err != nil || rec.State != runtime.StateSuccess || rec.Version != v || string(rec.Response) != fmt.Sprintf(`"r%d"`, i) {
				errs <- fmt.Errorf("record %d after its completion (version %d): %+v %v", i, v, rec, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b, st, failed := s.GroupCommitStats()
	t.Logf("group commit: %d batches, %d statements, %d failed", b, st, failed)
}
