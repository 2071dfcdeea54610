// Package b calls c; a calls b.
package b

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"c"
)

// SendCharge asks the payment gateway to charge.
func SendCharge(id string) error { return c.PostJSON("https://pay.example/charge", []byte(id)) }

// Validate does no I/O.
func Validate(id string) bool { return c.Checksum([]byte(id)) > 0 }

// Finish commits tx.
func Finish(tx *sql.Tx) error { return tx.Commit() }

// WithTx runs fn inside a transaction (an inferred runner).
func WithTx(db *sql.DB, fn func() error) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(); err != nil {
		return err
	}
	return tx.Commit()
}

// AfterCommit runs fn after the transaction committed (not a runner).
func AfterCommit(db *sql.DB, fn func() error) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := tx.Commit(); err != nil {
		return err
	}
	return fn()
}

// Retry calls fn up to n times (not a runner: it opens no transaction).
func Retry(n int, fn func() error) error {
	var err error
	for i := 0; i < n; i++ {
		if err = fn(); err == nil {
			return nil
		}
	}
	return err
}

// Repo hands out transactions.
type Repo struct {
	DB   *sql.DB
	Pool *pgxpool.Pool
	Gorm *gorm.DB
	Cur  *sql.Tx
}

// GetTx returns a freshly begun transaction (through c.OpenTx).
func (r *Repo) GetTx() (*sql.Tx, error) {
	tx, err := c.OpenTx(r.DB)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// GetPgxTx returns a freshly begun pgx transaction (through c.StartTx).
func (r *Repo) GetPgxTx(ctx context.Context) (pgx.Tx, error) { return c.StartTx(ctx, r.Pool) }

// Session returns a freshly begun gorm transaction.
func (r *Repo) Session(ctx context.Context) *gorm.DB { return r.Gorm.WithContext(ctx).Begin() }

// Current returns the transaction the repository already holds: not a
// fresh one.
func (r *Repo) Current() (*sql.Tx, error) { return r.Cur, nil }
