package pgstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestDoTxLiveClaimNotTakenBeforeSuccess is the schedule that broke DoTx's
// first design: a duplicate claims after the effect returned and before
// SUCCESS is written in the caller's transaction. The live call must keep
// its claim (the duplicate is told the call is in progress, then replays
// its answer once the caller commits), for a duplicate through DoTx and
// through runtime.Do alike.
func TestDoTxLiveClaimNotTakenBeforeSuccess(t *testing.T) {
	for _, door := range []string{"DoTx", "Do"} {
		t.Run(door, func(t *testing.T) {
			p := testPool(t)
			table := ordersTable(t, p)
			s := pgstore.New(p)
			rt, err := runtime.New(s, runtime.WithMaxWait(150*time.Millisecond), runtime.WithLease(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-1", Request: orderReq{"o-1", 7},
				Effect: insertOrder(table, &runs)}
			duplicate := func() (order, error) {
				if door == "Do" {
					return runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: call.Operation, Key: call.Key, Request: call.Request,
						Effect: func(ctx context.Context, r orderReq) (order, error) {
							runs.Add(1)
							return order{Ref: "from Do"}, nil
						}})
				}
				var o order
				err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					var err error
					o, err = pgstore.DoTx(ctx, rt, tx, call)
					return err
				})
				return o, err
			}
			var dupErr error
			pgstore.SetBeforeSuccess(s, func() {
				pgstore.SetBeforeSuccess(s, nil) // once: the duplicate's own DoTx must not recurse
				_, dupErr = duplicate()
			})
			var first order
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				first, err = pgstore.DoTx(ctx, rt, tx, call)
				return err
			})
			if err != nil {
				t.Fatalf("the live call: %v (the duplicate in its window: %v)", err, dupErr)
			}
			if !errors.Is(dupErr, runtime.ErrInProgress) {
				t.Errorf("duplicate while the call was about to commit: %v, want ErrInProgress", dupErr)
			}
			again, err := duplicate()
			if err != nil || again != first {
				t.Errorf("duplicate after the commit: %+v, %v; want the first answer %+v", again, err, first)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("effect ran %d times, want 1", n)
			}
			if got := count(t, p, "SELECT count(*) FROM "+table); got != 1 {
				t.Errorf("%d business rows, want 1", got)
			}
		})
	}
}

// TestDoTxDuplicatesMixed runs rounds of n concurrent duplicates of one
// call: DoTx callers that commit, DoTx callers that roll back after their
// answer, and runtime.Do callers, in an order drawn from a seed (printed,
// and set with -dotx.seed). In every round: no caller is told anything but
// the answer, exactly one outcome commits (one business row, or one
// runtime.Do effect), and the effect's code runs once per committed
// outcome plus once per rolled-back one. -dotx.rounds raises the rounds
// (the load run: 200).
func TestDoTxDuplicatesMixed(t *testing.T) {
	for _, n := range []int{16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			seed := *dotxSeed
			if seed == 0 {
				seed = time.Now().UnixNano()
			}
			t.Logf("seed %d (-dotx.seed=%d replays it)", seed, seed)
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
			p := testPool(t)
			table := ordersTable(t, p)
			rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(30*time.Second), runtime.WithLease(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for round := range *dotxRounds {
				dotxMixedRound(t, p, rt, table, rng, n, round)
				if t.Failed() {
					t.Fatalf("round %d failed (seed %d)", round, seed)
				}
			}
		})
	}
}

var (
	dotxSeed   = flag.Int64("dotx.seed", 0, "TestDoTxDuplicatesMixed: the seed (0: from the clock)")
	dotxRounds = flag.Int("dotx.rounds", 8, "TestDoTxDuplicatesMixed: rounds per size")
)

func dotxMixedRound(t *testing.T, p *pgxpool.Pool, rt *runtime.Runtime, table string, rng *rand.Rand, n, round int) {
	ctx := scopedCtx(fmt.Sprintf("%s/%d", t.Name(), round))
	key := fmt.Sprintf("order-%d", round)
	req := orderReq{key, 10 + round}
	const (
		txCommit = iota
		txRollback
		viaDo
	)
	kinds := make([]int, n)
	for i := range kinds {
		kinds[i] = []int{txCommit, txCommit, txRollback, viaDo}[rng.IntN(4)]
	}
	var (
		txRuns, doRuns                    atomic.Int32
		ranAndRolledBack, ranAndCommitted atomic.Int32
		wg                                sync.WaitGroup
		start                             = make(chan struct{})
		answers                           = make([]order, n)
		errs                              = make([]error, n)
		rollback                          = errors.New("the caller rolls back")
		// DoTx needs a second connection of the pool beside the caller's
		// transaction: a pool full of transactions that call DoTx waits on
		// itself. The test pool has 32 connections; at most 16 callers
		// hold a transaction at once, as the docs tell users to bound them.
		txSlots = make(chan struct{}, 16)
	)
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if kind == viaDo {
				answers[i], errs[i] = runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: key, Request: req,
					Effect: func(ctx context.Context, r orderReq) (order, error) {
						doRuns.Add(1)
						return order{ID: -1, Ref: r.OrderID, Amount: r.Amount}, nil
					}})
				return
			}
			ran := false
			txSlots <- struct{}{}
			defer func() { <-txSlots }()
			err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				var err error
				answers[i], err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: key, Request: req,
					Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
						ran = true
						o, err := insertOrder(table, &txRuns)(ctx, tx, r)
						time.Sleep(2 * time.Millisecond) // hold the transaction open a little
						return o, err
					}})
				if err != nil {
					return err
				}
				if kind == txRollback {
					return rollback
				}
				return nil
			})
			switch {
			case kind == txRollback && errors.Is(err, rollback):
				if ran {
					ranAndRolledBack.Add(1)
				}
			case err != nil:
				errs[i] = err
			case ran:
				ranAndCommitted.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	// A last caller that commits, so that every round has an outcome.
	var final order
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		var err error
		final, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: key, Request: req,
			Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
				o, err := insertOrder(table, &txRuns)(ctx, tx, r)
				if err == nil {
					ranAndCommitted.Add(1)
				}
				return o, err
			}})
		return err
	}); err != nil {
		t.Errorf("round %d: the last caller: %v", round, err)
		return
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("round %d: caller %d (kind %d): %v", round, i, kinds[i], err)
		}
	}
	rows := count(t, p, "SELECT count(*) FROM "+table+" WHERE ref = $1", key)
	if committed := int32(rows) + doRuns.Load(); committed != 1 {
		t.Errorf("round %d: %d outcomes committed (%d rows, %d runtime.Do effects), want 1", round, committed, rows, doRuns.Load())
	}
	if got, want := txRuns.Load(), ranAndCommitted.Load()+ranAndRolledBack.Load(); got != want {
		t.Errorf("round %d: DoTx effect ran %d times, want %d (%d committed, %d rolled back)", round, got, want, ranAndCommitted.Load(), ranAndRolledBack.Load())
	}
	for i, kind := range kinds {
		if errs[i] == nil && kind != txRollback && answers[i] != final {
			t.Errorf("round %d: caller %d (kind %d) got %+v, the outcome is %+v", round, i, kind, answers[i], final)
		}
	}
}
