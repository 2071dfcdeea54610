// Package txstore: helpers that end the transaction they are given, on
// every path or only on some (used by package endhelpers, so that what
// they do reaches it as facts).
package txstore

import (
	"context"
	"database/sql"
	"log"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
)

// Commit commits on every path.
func Commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

// Rollback rolls back on every path.
func Rollback(ctx context.Context, tx pgx.Tx) {
	if err := tx.Rollback(ctx); err != nil {
		log.Printf("rollback: %v", err)
	}
}

// UnitOfWork holds the transaction in a field.
type UnitOfWork struct {
	Tx pgx.Tx
}

// Finish commits the transaction held in the receiver's field.
func (u *UnitOfWork) Finish(ctx context.Context) error { return u.Tx.Commit(ctx) }

// Done ends the transaction with a deferred rollback: it is ended when Done
// returns.
func Done(ctx context.Context, tx pgx.Tx, note string) {
	defer tx.Rollback(ctx)
	log.Print(note)
}

// PanicIfErrorWithRollback rolls back and panics when err is set, and
// does nothing otherwise: when it returns, the transaction is open.
func PanicIfErrorWithRollback(err error, tx *gorm.DB) {
	if err != nil {
		tx.Rollback()
		panic(err)
	}
}

// FatalIfErr rolls back and exits when err is set.
func FatalIfErr(err error, tx *sql.Tx) {
	if err != nil {
		_ = tx.Rollback()
		log.Fatalf("write: %v", err)
	}
}

// RollbackOnErr rolls back exactly when it returns an error.
func RollbackOnErr(ctx context.Context, tx pgx.Tx, err error) error {
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return nil
}
