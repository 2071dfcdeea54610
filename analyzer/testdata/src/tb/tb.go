// Package tb holds helpers known to t through facts.
package tb

import (
	"context"
	"database/sql"
	"errors"
	"net"
)

type Status string

const (
	StatusFailed  Status = "FAILED"
	StatusUnknown Status = "UNKNOWN"
)

// MarkFailed writes a FAILED status.
func MarkFailed(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE payments SET state='FAILED' WHERE id=$1", id)
	return err
}

// SetStatus writes status.
func SetStatus(ctx context.Context, db *sql.DB, id string, status Status) error {
	_, err := db.ExecContext(ctx, "UPDATE payments SET state=$1 WHERE id=$2", string(status), id)
	return err
}

// IsTimeout tells a timeout apart.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
