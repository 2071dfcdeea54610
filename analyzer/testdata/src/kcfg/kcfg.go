// Package kcfg is checked with -tables=request_log.
package kcfg

import (
	"context"
	"database/sql"

	"kb"
)

func configured(ctx context.Context, db *sql.DB, id string) error {
	db.ExecContext(ctx, "DELETE FROM request_log WHERE request_id = $1", id) // want `the idempotency token is deleted`
	return kb.Charge(ctx, id)
}

func notConfigured(ctx context.Context, db *sql.DB, id string) error {
	db.ExecContext(ctx, "DELETE FROM audit_log WHERE request_id = $1", id)
	return kb.Charge(ctx, id)
}
