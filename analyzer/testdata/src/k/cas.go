package k

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"

	"kb"
)

// 12b. the nonce is read only to find the row; a compare-and-set on the
// row's status (rows affected checked) claims it before the effect.
func casClaim(ctx context.Context, db *sql.DB, nonce string) error {
	var id string
	if err := db.QueryRowContext(ctx, "SELECT order_id FROM nonces WHERE nonce = $1", nonce).Scan(&id); err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAYING' WHERE id = $1 AND status = 'AWAITING'", id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, id); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "DELETE FROM nonces WHERE nonce = $1", nonce)
	return err
}

// 12b. the same with pgx's command tag.
func casClaimPgx(ctx context.Context, pool *pgxpool.Pool, nonce string) error {
	var id string
	if err := pool.QueryRow(ctx, "SELECT order_id FROM nonces WHERE nonce = $1", nonce).Scan(&id); err != nil {
		return err
	}
	tag, err := pool.Exec(ctx, "UPDATE orders SET status = $2 WHERE id = $1 AND status = $3", id, "PAYING", "AWAITING")
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, id); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "DELETE FROM nonces WHERE nonce = $1", nonce)
	return err
}

// 14. the same UPDATE with its rows affected dropped claims nothing.
func casDropped(ctx context.Context, db *sql.DB, nonce string) error {
	var id string
	if err := db.QueryRowContext(ctx, "SELECT order_id FROM nonces WHERE nonce = $1", nonce).Scan(&id); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAYING' WHERE id = $1 AND status = 'AWAITING'", id); err != nil {
		return err
	}
	if err := kb.Charge(ctx, id); err != nil { // want `runs after a non-atomic check of the idempotency token`
		return err
	}
	_, err := db.ExecContext(ctx, "DELETE FROM nonces WHERE nonce = $1", nonce)
	return err
}
