// Package outbox is a transactional outbox: the event is written in the
// caller's transaction and delivered by a relay after the commit.
package outbox

import (
	"context"
	"database/sql"
)

// Publish writes the event in tx.
func Publish(ctx context.Context, tx *sql.Tx, event string) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO outbox (event) VALUES ($1)", event)
	return err
}
