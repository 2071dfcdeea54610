// Package ctcfg is checked with -tables=request_log.
package ctcfg

import (
	"context"
	"database/sql"
	"errors"
)

// 20. A table listed with -tables.
func logOnce(ctx context.Context, db *sql.DB, id string) error {
	var x int
	err := db.QueryRowContext(ctx, "SELECT 1 FROM request_log WHERE id = $1", id).Scan(&x)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO request_log (id) VALUES ($1)", id) // want `inserts into request_log`
	}
	return err
}

func logOnceAtomic(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO request_log (id) VALUES ($1) ON CONFLICT DO NOTHING", id)
	return err
}
