// Package endhelpers: transactions ended through helpers of another
// package (facts), by their real control flow: a helper that commits or
// rolls back on every path ends the transaction at the call; one that
// rolls back only where it panics or exits leaves it open; one that rolls
// back exactly when it returns an error ends it on that branch.
package endhelpers

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"example.com/orm/netx"
	"example.com/orm/txrpc/endhelpers/txstore"
)

type Order struct {
	ID    string
	State string
}

// CommitHelperThenCall: committed through a helper, then the call.
func CommitHelperThenCall(ctx context.Context, pool *pgxpool.Pool, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'PROCESSING' WHERE id = $1", id); err != nil {
		txstore.Rollback(ctx, tx)
		return err
	}
	if err := txstore.Commit(ctx, tx); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}

// FieldCommitThenCall: committed through a method reading the
// transaction from its receiver's field.
func FieldCommitThenCall(ctx context.Context, pool *pgxpool.Pool, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	u := &txstore.UnitOfWork{Tx: tx}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'PROCESSING' WHERE id = $1", id); err != nil {
		return err
	}
	if err := u.Finish(ctx); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}

// DeferringHelper: the helper defers the rollback, so the transaction is
// ended when it returns.
func DeferringHelper(ctx context.Context, pool *pgxpool.Pool, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	txstore.Done(ctx, tx, "read only")
	return netx.Notify(ctx, id)
}

// PanicHelper: PanicIfErrorWithRollback ends the transaction only where
// it panics; the payment is created while it is open.
func PanicHelper(ctx context.Context, db *gorm.DB, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txstore.PanicIfErrorWithRollback(err, tx)
	err = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	txstore.PanicIfErrorWithRollback(err, tx)
	tx.Commit()
}

// PanicHelperAfterCommit: the twin, calling after the commit.
func PanicHelperAfterCommit(ctx context.Context, db *gorm.DB, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txstore.PanicIfErrorWithRollback(err, tx)
	tx.Commit()
	_ = netx.Charge(ctx, id, 100)
}

// FatalHelper: rolled back only where the process exits.
func FatalHelper(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "UPDATE orders SET state = 'PROCESSING' WHERE id = $1", id)
	txstore.FatalIfErr(err, tx)
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit()
}

// RollbackOnErrHelper: ended on the branch where the helper returns an
// error, open on the other.
func RollbackOnErrHelper(ctx context.Context, pool *pgxpool.Pool, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "UPDATE orders SET state = 'PROCESSING' WHERE id = $1", id)
	if err := txstore.RollbackOnErr(ctx, tx, err); err != nil {
		_ = netx.Notify(ctx, "failed/"+id) // rolled back: silent
		return err
	}
	if err := netx.Charge(ctx, id, 100); err != nil { // want `netx.Charge .*while the database transaction`
		return err
	}
	return tx.Commit(ctx)
}

// CommitInOneBranch: committed in one branch only.
func CommitInOneBranch(ctx context.Context, pool *pgxpool.Pool, id string, paid bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if paid {
		if err := txstore.Commit(ctx, tx); err != nil {
			return err
		}
		return netx.Notify(ctx, id)
	}
	if err := netx.Charge(ctx, id, 100); err != nil { // want `netx.Charge .*while the database transaction`
		txstore.Rollback(ctx, tx)
		return err
	}
	return txstore.Commit(ctx, tx)
}

// ReuseVariable: committed through the helper, then the variable holds a
// second transaction, open at the call.
func ReuseVariable(ctx context.Context, pool *pgxpool.Pool, id string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := txstore.Commit(ctx, tx); err != nil {
		return err
	}
	_ = netx.Notify(ctx, "first/"+id) // the first is committed: silent
	tx, err = pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { txstore.Rollback(ctx, tx) }()
	if err := netx.Charge(ctx, id, 100); err != nil { // want `netx.Charge .*while the database transaction`
		return err
	}
	if err := txstore.Commit(ctx, tx); err != nil {
		return err
	}
	return netx.Notify(ctx, "second/"+id)
}
