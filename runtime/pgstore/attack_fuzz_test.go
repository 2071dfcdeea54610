//go:build idemattack

package pgstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

var (
	atkSeed   = flag.Uint64("atk.seed", 1, "TestAttackFuzz seed")
	atkRounds = flag.Int("atk.rounds", 15, "TestAttackFuzz rounds")
	atkWithDo = flag.Bool("atk.do", false, "TestAttackFuzz: include unfenced runtime.Do callers (outside the docs: DoTx operations through DoTx only)")
)

// TestAttackFuzz: rounds of 8 concurrent callers of one identity, on a
// tiny lease (30 ms), with effects up to three leases long, mixing: DoTx
// that commits, rolls back, rolls back a savepoint around DoTx then
// commits, is killed (pg_terminate_backend) after DoTx, holds its
// transaction open after DoTx, fails permanently; runtime.Do. Invariants:
// one committed effect at most; every success answer is the committed one
// (or, for a caller whose own transaction then died, its own); a permanent
// failure answer only when FAILED is the final state with no rows.
func TestAttackFuzz(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	const lease = 30 * time.Millisecond
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithMaxWait(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(*atkSeed, 7))
	kinds := []string{"commit", "rollback", "sp-rollback-commit", "kill", "hold", "permanent", "commit-long", "commit"}
	if *atkWithDo {
		kinds[7] = "do"
	}
	for round := range *atkRounds {
		ctx := scopedCtx(fmt.Sprintf("%s/%d", t.Name(), round))
		key := "k"
		type result struct {
			kind    string
			resp    order
			err     error
			txEnd   error // commit error (nil: committed)
			ownRow  bool  // this caller's own effect ran and returned success
			planned []string
		}
		res := make([]result, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			kind := kinds[rng.IntN(len(kinds))]
			effDur := time.Duration(rng.IntN(int(3 * lease)))
			startDelay := time.Duration(rng.IntN(int(4 * lease)))
			holdFor := time.Duration(rng.IntN(int(6 * lease)))
			res[i].kind = kind
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(startDelay)
				me := fmt.Sprintf("c%d", i)
				req := orderReq{OrderID: "o", Amount: 1}
				eff := func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					var o order
					if err := tx.QueryRow(ectx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2) RETURNING id, ref, amount", me, r.Amount).
						Scan(&o.ID, &o.Ref, &o.Amount); err != nil {
						return o, err
					}
					d := effDur
					if kind == "commit-long" {
						d = 3 * lease
					}
					time.Sleep(d)
					if kind == "permanent" {
						return o, runtime.Permanent(errors.New("declined by " + me))
					}
					return o, nil
				}
				if kind == "do" {
					o, err := runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: "Atk.Fuzz", Key: key, Request: req,
						Effect: func(ectx context.Context, r orderReq) (order, error) {
							var o order
							err := p.QueryRow(ectx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2) RETURNING id, ref, amount", "do:"+me, r.Amount).
								Scan(&o.ID, &o.Ref, &o.Amount)
							time.Sleep(effDur)
							return o, err
						}})
					res[i].resp, res[i].err = o, err
					return
				}
				call := pgstore.TxCall[orderReq, order]{Operation: "Atk.Fuzz", Key: key, Request: req, Effect: eff}
				tx, err := p.Begin(ctx)
				if err != nil {
					res[i].err = err
					return
				}
				var o order
				switch kind {
				case "sp-rollback-commit":
					sp, err := tx.Begin(ctx)
					if err != nil {
						res[i].err = err
						return
					}
					o, err = pgstore.DoTx(ctx, rt, sp, call)
					res[i].resp, res[i].err = o, err
					_ = sp.Rollback(ctx)
					time.Sleep(holdFor)
					res[i].txEnd = errors.Join(errors.New("savepoint rolled back"), tx.Commit(ctx))
					return
				default:
					o, err = pgstore.DoTx(ctx, rt, tx, call)
				}
				res[i].resp, res[i].err = o, err
				if err != nil {
					if errors.Is(err, pgstore.ErrRollbackRequired) {
						res[i].txEnd = errors.Join(errors.New("rolled back"), tx.Rollback(ctx))
					} else {
						res[i].txEnd = errors.Join(errors.New("committed after error"), tx.Commit(ctx))
					}
					return
				}
				switch kind {
				case "rollback":
					time.Sleep(holdFor)
					_ = tx.Rollback(ctx)
					res[i].txEnd = errors.New("rolled back")
				case "kill":
					var pid int
					_ = tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
					time.Sleep(holdFor / 2)
					_, _ = p.Exec(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pid)
					res[i].txEnd = errors.Join(errors.New("killed"), tx.Commit(ctx))
				case "hold":
					time.Sleep(holdFor)
					res[i].txEnd = tx.Commit(ctx)
				default:
					res[i].txEnd = tx.Commit(ctx)
				}
			}()
		}
		wg.Wait()
		// final state
		var state string
		_ = p.QueryRow(context.Background(), "SELECT state FROM idem_records WHERE scope=$1 AND operation='Atk.Fuzz' AND key=$2",
			runtime.ScopeFrom(ctx), key).Scan(&state)
		rows, err := p.Query(context.Background(), "SELECT id, ref, amount FROM "+table+" WHERE ref IN ('c0','c1','c2','c3','c4','c5','c6','c7','do:c0','do:c1','do:c2','do:c3','do:c4','do:c5','do:c6','do:c7') AND id > $1", 0)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[order])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(context.Background(), "DELETE FROM "+table); err != nil {
			t.Fatal(err)
		}
		bad := false
		report := func(f string, a ...any) { bad = true; t.Errorf("round %d: "+f, append([]any{round}, a...)...) }
		if len(committed) > 1 {
			report("%d effects committed: %+v", len(committed), committed)
		}
		if state == "FAILED" && len(committed) != 0 {
			report("FAILED recorded and %d effects committed", len(committed))
		}
		if state == "SUCCESS" && len(committed) != 1 {
			report("SUCCESS recorded and %d effects committed", len(committed))
		}
		for i, r := range res {
			switch {
			case r.err == nil:
				if len(committed) == 1 && r.resp == committed[0] {
					continue // the committed answer (its own, or a replay)
				}
				if r.txEnd != nil && r.kind != "do" && r.resp.Ref == fmt.Sprintf("c%d", i) {
					continue // its own answer, and its own transaction then ended without committing
				}
				report("c%d (%s) told success %+v, committed %+v (state %s), tx end %v", i, r.kind, r.resp, committed, state, r.txEnd)
			case !errors.Is(r.err, runtime.ErrPermanent) && !errors.Is(r.err, runtime.ErrInProgress) && !errors.Is(r.err, runtime.ErrLeaseLost):
				t.Logf("round %d: c%d (%s) other error: %v", round, i, r.kind, r.err)
			case errors.Is(r.err, runtime.ErrPermanent):
				if state != "FAILED" || len(committed) != 0 {
					report("c%d (%s) told permanent failure %v but state %s, committed %+v", i, r.kind, r.err, state, committed)
				}
			}
		}
		if bad || testing.Verbose() {
			for i, r := range res {
				t.Logf("round %d c%d %-18s resp=%+v err=%v txEnd=%v", round, i, r.kind, r.resp, r.err, r.txEnd)
			}
			t.Logf("round %d: state %s committed %+v", round, state, committed)
		}
	}
}
