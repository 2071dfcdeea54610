// Package notify tells the webhooks about a user's change.
package notify

import (
	"database/sql"

	"example.com/orm/hooks/webhooks"
)

// TriggerWebhooks hands the event to the manager.
func TriggerWebhooks(tx *sql.Tx, m webhooks.Manager, event, userID string) {
	m.Trigger(tx, event, []byte(`{"user":"`+userID+`"}`))
}

// NotifyUserChange triggers the user.update event.
func NotifyUserChange(tx *sql.Tx, m webhooks.Manager, userID string) {
	TriggerWebhooks(tx, m, "user.update", userID)
}
