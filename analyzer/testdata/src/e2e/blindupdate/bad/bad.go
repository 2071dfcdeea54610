// Package bad marks an order paid with a blind UPDATE.
package bad

import (
	"context"
	"database/sql"
)

func MarkPaid(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1", id)
	return err
}
