package doors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// txDoor runs pgstore.DoTx in concurrent caller transactions: the effect
// inserts a row in the caller's transaction, which then holds the
// transaction open a while (so that duplicates block on the claim row) and
// commits, rolls back, or fails on its own after DoTx (and rolls back). The
// downstream is the table: a row per committed effect, counted per
// identity at the end.
type txDoor struct {
	r       *run
	workers []*runtime.Runtime
	// slots bounds the callers' transactions open at once below the
	// pool's size, as DoTx's doc asks: each DoTx also needs a connection
	// of the pool for its claim, and a pool whose every connection is a
	// caller's transaction waiting in DoTx cannot make progress.
	slots chan struct{}
}

const txTable = "idem_sim_doors_effects"

func (x *txDoor) setup(r *run) error {
	x.r = r
	x.slots = make(chan struct{}, max(1, r.cfg.Pool.Config().MaxConns/2))
	if _, ok := r.cfg.Store.(*pgstore.Store); !ok {
		return fmt.Errorf("DoorTx needs a *pgstore.Store, not %T", r.cfg.Store)
	}
	// Runs of the door in parallel (TestSimDoors' dotx and groupcommit-dotx)
	// create the table at once, and CREATE TABLE IF NOT EXISTS is not safe
	// beside itself (a unique violation on pg_type, seen in CI): one at a
	// time, under an advisory lock.
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", txTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+txTable+` (
			scope text NOT NULL, ident text NOT NULL, receipt text NOT NULL, amount bigint NOT NULL, delivery int NOT NULL,
			PRIMARY KEY (scope, receipt))`)
		return err
	}); err != nil {
		return err
	}
	policies := []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.RecordFailed, runtime.ReleaseRecord}
	for i, p := range policies {
		// DoTx needs the *pgstore.Store itself: no fault wrapper.
		rt, err := runtime.New(r.cfg.Store, r.runtimeOptions(fmt.Sprintf("%s/tx%d", r.scope, i), p)...)
		if err != nil {
			return err
		}
		x.workers = append(x.workers, rt)
	}
	return nil
}

func (x *txDoor) ops() [2]string { return [2]string{"SimDoors.Tx.Book", "SimDoors.Tx.Ship"} }
func (x *txDoor) close()         {}

func (x *txDoor) encodeSuccess(rc simpay.Receipt) ([]byte, error) { return json.Marshal(rc) }

var txReceipts atomic.Int64

func (x *txDoor) call(ctx context.Context, dl *delivery) answer {
	r, rq := x.r, dl.req
	ident := r.ident(rq)
	select {
	case x.slots <- struct{}{}:
		defer func() { <-x.slots }()
	case <-ctx.Done():
		return answer{kind: ansDeadline, detail: "waiting for a transaction slot: " + ctx.Err().Error()}
	}
	tx, err := r.cfg.Pool.Begin(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return answer{kind: ansDeadline, detail: err.Error()}
		}
		return answer{kind: ansOther, detail: "begin: " + err.Error()}
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	ran := false // an effect of this transaction's that it still holds
	doTx := func(n int) (simpay.Receipt, error) {
		var held *rowLock // the record's row, locked by another session
		rc, err := pgstore.DoTx(ctx, x.workers[dl.plan.worker], tx, pgstore.TxCall[simpay.Request, simpay.Receipt]{
			Operation: x.ops()[rq.route], Key: rq.key, Request: rq.req,
			Effect: func(ctx context.Context, tx pgx.Tx, req simpay.Request) (simpay.Receipt, error) {
				ran = true
				a, ok := runtime.AttemptFrom(ctx)
				if ok {
					r.learn(rq.route, a.ID.Operation)
				}
				r.note(ident, "DoTx effect runs for delivery %d, call %d (%s)", dl.id, n, dl.plan.mode)
				switch dl.plan.mode {
				case mPermanent:
					// Declines a while in, so that duplicates block on the
					// claim row meanwhile.
					if err := sleepCtx(ctx, r.cfg.Lease/5); err != nil {
						return simpay.Receipt{}, err
					}
					if dl.plan.failFailed && ok && held == nil {
						held = x.lockRow(dl, a.ID)
					}
					return simpay.Receipt{}, runtime.Permanent(fmt.Errorf("%w: %s", errDeclined, failurePage()))
				case mSlow:
					if err := sleepCtx(ctx, r.cfg.Lease*6/10); err != nil {
						return simpay.Receipt{}, err
					}
				}
				rc := simpay.Receipt{ID: fmt.Sprintf("rc_tx_%d", txReceipts.Add(1)), Identity: ident, Amount: req.Amount}
				_, err := tx.Exec(ctx, `INSERT INTO `+txTable+` VALUES ($1, $2, $3, $4, $5)`, r.scope, ident, rc.ID, rc.Amount, dl.id)
				return rc, err
			},
		})
		if held != nil {
			// No one could write the record while the row was held: a
			// failure answer now was never recorded.
			if a := classifyRuntime(ctx, rc, err); a.kind == ansFailed {
				r.violate("a failure is an answer only once recorded", ident,
					"delivery %d, DoTx call %d: another session held the record's row from the decline until DoTx returned, so its FAILED write could not be made, and it was told the call failed: %s", dl.id, n, short(a.detail))
			}
			held.release()
			r.note(ident, "delivery %d: the row lock on the record is released", dl.id)
		}
		return rc, err
	}
	var rc simpay.Receipt
	switch dl.plan.inTx {
	case inTxTwice:
		// The second call replays what the first left in the transaction:
		// the same receipt, or the same refusal.
		rc1, err1 := doTx(1)
		r.note(ident, "delivery %d: first DoTx returned (its effect ran: %v): %s", dl.id, ran, short(fmt.Sprint(err1)))
		if !errors.Is(err1, pgstore.ErrRollbackRequired) {
			rc, err = doTx(2)
			if err1 == nil && err == nil && rc != rc1 {
				r.violate("a transaction's second call replays its first", ident,
					"delivery %d: DoTx twice in one transaction: %+v, then %+v", dl.id, rc1, rc)
			}
		} else {
			rc, err = rc1, err1
		}
	case inTxSavepointRetry:
		if _, err = tx.Exec(ctx, `SAVEPOINT sim_retry`); err != nil {
			break
		}
		_, err1 := doTx(1)
		r.note(ident, "delivery %d: first DoTx returned (its effect ran: %v): %s; the caller rolls back its savepoint", dl.id, ran, short(fmt.Sprint(err1)))
		if err1 != nil && strings.Contains(err1.Error(), lateStartText) {
			r.mu.Lock()
			dl.firstLateStart = true
			r.mu.Unlock()
		}
		if errors.Is(err1, pgstore.ErrRollbackRequired) {
			err = err1
			break
		}
		if _, err = tx.Exec(context.WithoutCancel(ctx), `ROLLBACK TO SAVEPOINT sim_retry`); err != nil {
			err = fmt.Errorf("%w: rolling back to the savepoint: %w", pgstore.ErrRollbackRequired, err)
			break
		}
		ran = false
		from := time.Now()
		rc, err = doTx(2)
		if errors.Is(err, runtime.ErrInProgress) {
			// Another transaction's claim, or its own (checkOwnWait).
			r.mu.Lock()
			dl.retryWait = [2]time.Time{from, time.Now()}
			r.modes["dotx-savepoint-retry-in-progress"]++
			r.mu.Unlock()
		}
	default:
		rc, err = doTx(1)
	}
	a := classifyRuntime(ctx, rc, err)
	r.note(ident, "delivery %d (%s): DoTx returned (an effect it holds ran: %v): %s %s", dl.id, dl.plan.inTx, ran, a.kind, short(a.detail))
	// The caller holds its transaction open a while: duplicates block on
	// the claim row meanwhile.
	time.Sleep(r.cfg.Lease / 4)
	end := dl.plan.tx
	if err != nil && errors.Is(err, pgstore.ErrRollbackRequired) {
		end = txRollback
	}
	switch end {
	case txCommit:
		if cerr := tx.Commit(context.Background()); cerr != nil {
			r.note(ident, "delivery %d: commit failed: %v", dl.id, cerr)
			if a.kind == ansSuccess {
				a = answer{kind: ansLater, detail: "commit failed: " + cerr.Error()}
			}
		} else {
			r.note(ident, "delivery %d: the caller commits", dl.id)
		}
	default:
		_ = tx.Rollback(context.Background())
		r.note(ident, "delivery %d: the caller rolls back (%v)", dl.id, end == txFailAfter)
		if a.kind == ansSuccess && ran {
			// Its own effect, rolled back by its own caller: the client
			// knows nothing committed.
			a = answer{kind: ansLater, detail: "own effect rolled back by its caller"}
		}
	}
	return a
}

// loadLedger reads the committed effects.
func (x *txDoor) loadLedger() error {
	r := x.r
	rows, err := r.cfg.Pool.Query(context.Background(), `SELECT ident, receipt, amount, delivery FROM `+txTable+` WHERE scope = $1 ORDER BY receipt`, r.scope)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for rows.Next() {
		var e effectRec
		if err := rows.Scan(&e.receipt.Identity, &e.receipt.ID, &e.receipt.Amount, &e.delivery); err != nil {
			return err
		}
		r.ledger[e.receipt.Identity] = append(r.ledger[e.receipt.Identity], e)
	}
	return rows.Err()
}

// rowLock is a transaction of a connection of its own (not the pool's,
// which the callers' transactions and DoTx's claims share) that holds a
// record's row locked.
type rowLock struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

// lockRow locks the row of id's record from another session, so that
// DoTx's FAILED write, committed on its own, waits for it past the
// completion timeout and is not made (the row lock a FAILED write can meet
// in production: a long transaction of the caller's, an operator's
// session). It returns nil, with a note, when the lock is not had at once.
func (x *txDoor) lockRow(dl *delivery, id runtime.Identity) *rowLock {
	r := x.r
	ctx, cancel := context.WithTimeout(context.Background(), 2*r.cfg.Lease)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, r.cfg.Pool.Config().ConnConfig.Copy())
	if err != nil {
		r.note(r.ident(dl.req), "delivery %d: no row lock (connect: %v)", dl.id, err)
		return nil
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "SET LOCAL lock_timeout = '200ms'")
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = tx.Exec(ctx, "SELECT 1 FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3 FOR UPDATE", id.Scope, id.Operation, id.Key)
	}
	if err != nil || tag.RowsAffected() != 1 {
		r.note(r.ident(dl.req), "delivery %d: no row lock (%d rows: %v)", dl.id, tag.RowsAffected(), err)
		_ = conn.Close(context.Background())
		return nil
	}
	r.mu.Lock()
	dl.storeFault = true
	r.faults["FAILED writes wait on a row lock (DoTx)"]++
	r.mu.Unlock()
	r.note(r.ident(dl.req), "fault: delivery %d declines while another session holds the record's row: its FAILED write waits", dl.id)
	return &rowLock{conn: conn, tx: tx}
}

// release ends the lock's transaction and closes its connection.
func (l *rowLock) release() {
	_ = l.tx.Rollback(context.Background())
	_ = l.conn.Close(context.Background())
}
