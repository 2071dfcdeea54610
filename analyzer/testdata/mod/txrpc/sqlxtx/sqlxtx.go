// Package sqlxtx: sqlx transactions (Beginx, BeginTxx, MustBegin), whose
// Tx embeds *sql.Tx.
package sqlxtx

import (
	"context"

	"github.com/jmoiron/sqlx"

	"example.com/orm/netx"
)

func Beginx(ctx context.Context, db *sqlx.DB, id string) error {
	tx, err := db.Beginx()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET state = 'PROCESSING' WHERE id = $1", id); err != nil {
		return err
	}
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit()
}

func MustBegin(ctx context.Context, db *sqlx.DB, id string) error {
	tx := db.MustBegin()
	tx.MustExec("UPDATE payments SET state = 'PROCESSING' WHERE id = $1", id)
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// BeginTxxCommitFirst: silent.
func BeginTxxCommitFirst(ctx context.Context, db *sqlx.DB, id string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET state = 'PROCESSING' WHERE id = $1", id); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}
