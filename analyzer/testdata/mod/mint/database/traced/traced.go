// Package traced holds decorators of a MintDB: one times its calls, one
// counts its commits and rollbacks.
package traced

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/orm/mint/database"
)

// DB is a MintDB that logs how long each call of the one it wraps takes.
type DB struct{ Inner database.MintDB }

func since(op string, t time.Time) { slog.Debug(op, slog.Duration("took", time.Since(t))) }

func (d DB) GetTx(ctx context.Context) (pgx.Tx, error) {
	defer since("GetTx", time.Now())
	return d.Inner.GetTx(ctx)
}

func (d DB) Commit(ctx context.Context, tx pgx.Tx) error {
	defer since("Commit", time.Now())
	return d.Inner.Commit(ctx, tx)
}

func (d DB) Rollback(ctx context.Context, tx pgx.Tx) error {
	defer since("Rollback", time.Now())
	return d.Inner.Rollback(ctx, tx)
}

func (d DB) GetQuote(tx pgx.Tx, id string) (database.Quote, error) { return d.Inner.GetQuote(tx, id) }

func (d DB) SetState(tx pgx.Tx, id, state string) error { return d.Inner.SetState(tx, id, state) }

func (d DB) ChangeCheckingID(tx pgx.Tx, id, checkingID string) error {
	return d.Inner.ChangeCheckingID(tx, id, checkingID)
}

// Counted embeds a MintDB and counts its commits and rollbacks: the other
// methods are the embedded one's.
type Counted struct {
	database.MintDB
	Commits, Rollbacks int
}

func (c *Counted) Commit(ctx context.Context, tx pgx.Tx) error {
	c.Commits++
	return c.MintDB.Commit(ctx, tx)
}

func (c *Counted) Rollback(ctx context.Context, tx pgx.Tx) error {
	c.Rollbacks++
	return c.MintDB.Rollback(ctx, tx)
}
