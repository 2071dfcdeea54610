// Package postgresql implements database.MintDB on a pgx pool.
package postgresql

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/orm/mint/database"
)

// Postgresql is the production MintDB.
type Postgresql struct{ pool *pgxpool.Pool }

func (p Postgresql) GetTx(ctx context.Context) (pgx.Tx, error) { return p.pool.Begin(ctx) }

func (p Postgresql) Commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

func (p Postgresql) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

func (p Postgresql) GetQuote(tx pgx.Tx, id string) (database.Quote, error) {
	var q database.Quote
	err := tx.QueryRow(context.Background(), "SELECT id, request, state, checking_id FROM quotes WHERE id = $1 FOR UPDATE NOWAIT", id).
		Scan(&q.ID, &q.Request, &q.State, &q.CheckingID)
	return q, err
}

func (p Postgresql) SetState(tx pgx.Tx, id, state string) error {
	_, err := tx.Exec(context.Background(), "UPDATE quotes SET state = $2 WHERE id = $1", id, state)
	return err
}

func (p Postgresql) ChangeCheckingID(tx pgx.Tx, id, checkingID string) error {
	_, err := tx.Exec(context.Background(), "UPDATE quotes SET checking_id = $2 WHERE id = $1", id, checkingID)
	return err
}
