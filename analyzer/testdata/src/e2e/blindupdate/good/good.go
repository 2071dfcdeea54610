// Package good marks an order paid with a compare-and-set.
package good

import (
	"context"
	"database/sql"
	"errors"
)

func MarkPaid(ctx context.Context, db *sql.DB, id string) error {
	res, err := db.ExecContext(ctx, "UPDATE orders SET status = 'PAID' WHERE id = $1 AND status = 'PROCESSING'", id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errors.New("the order was not PROCESSING")
	}
	return nil
}
