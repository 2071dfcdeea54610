// Package outbox writes events into the transaction; a relay sends them
// after the commit.
package outbox

import "database/sql"

// Publish inserts the event in tx.
func Publish(tx *sql.Tx, event, userID string) error {
	_, err := tx.Exec("INSERT INTO outbox (event, user_id) VALUES ($1, $2)", event, userID)
	return err
}
