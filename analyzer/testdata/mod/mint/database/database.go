// Package database declares what the mint needs of its database.
package database

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Quote is a mint or melt quote.
type Quote struct {
	ID         string
	Request    string
	State      string
	CheckingID string
}

// MintDB hands out transactions and ends them.
type MintDB interface {
	GetTx(ctx context.Context) (pgx.Tx, error)
	Commit(ctx context.Context, tx pgx.Tx) error
	Rollback(ctx context.Context, tx pgx.Tx) error
	GetQuote(tx pgx.Tx, id string) (Quote, error)
	SetState(tx pgx.Tx, id, state string) error
	ChangeCheckingID(tx pgx.Tx, id, checkingID string) error
}
