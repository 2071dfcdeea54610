// Package b calls c; a calls b.
package b

import (
	"database/sql"

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
