// Package events implements domain.EventPublisher twice: over HTTP, and
// into an outbox table (the transactional outbox).
package events

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
)

type HTTP struct {
	HTTP *http.Client
	URL  string
}

func (h *HTTP) Publish(ctx context.Context, topic, payload string) error {
	resp, err := h.HTTP.Post(h.URL+"/"+topic, "application/json", strings.NewReader(payload))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Outbox writes the event in the caller's transaction; a relay sends it
// after commit.
type Outbox struct{ Tx *sql.Tx }

func (o *Outbox) Publish(ctx context.Context, topic, payload string) error {
	_, err := o.Tx.ExecContext(ctx, "INSERT INTO outbox (topic, payload) VALUES ($1, $2)", topic, payload)
	return err
}
