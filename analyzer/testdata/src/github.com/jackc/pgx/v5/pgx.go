// Package pgx is a minimal stub of github.com/jackc/pgx/v5 for tests.
package pgx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoRows occurs when rows are expected but none are returned.
var ErrNoRows = errors.New("no rows in result set")

type TxOptions struct{ IsoLevel string }

type Row interface{ Scan(dest ...any) error }

type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Close()
}

// Tx is a database transaction; Begin on a Tx starts a savepoint.
type Tx interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	Conn() *Conn
}

type Conn struct{}

func Connect(ctx context.Context, connString string) (*Conn, error) { return &Conn{}, nil }

func (c *Conn) Begin(ctx context.Context) (Tx, error)                        { return nil, nil }
func (c *Conn) BeginTx(ctx context.Context, txOptions TxOptions) (Tx, error) { return nil, nil }
func (c *Conn) Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) Row { return nil }
func (c *Conn) Close(ctx context.Context) error                           { return nil }

// BeginFunc starts a transaction and calls fn. If fn does not return an
// error then it commits, otherwise it rolls back.
func BeginFunc(ctx context.Context, db interface {
	Begin(ctx context.Context) (Tx, error)
}, fn func(Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// BeginTxFunc is BeginFunc with options.
func BeginTxFunc(ctx context.Context, db interface {
	BeginTx(ctx context.Context, txOptions TxOptions) (Tx, error)
}, txOptions TxOptions, fn func(Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, txOptions)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
