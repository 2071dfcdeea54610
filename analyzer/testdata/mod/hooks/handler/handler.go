// Package handler updates users inside a persister's transaction and tells
// the webhooks.
package handler

import (
	"context"
	"database/sql"
	"fmt"

	"example.com/orm/hooks/notify"
	"example.com/orm/hooks/outbox"
	"example.com/orm/hooks/webhooks"
)

// Persister runs fn in a transaction.
type Persister struct{ DB *sql.DB }

// Transaction runs fn in a transaction, committed when fn returns nil.
func (p *Persister) Transaction(fn func(tx *sql.Tx) error) error {
	tx, err := p.DB.BeginTx(context.Background(), nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Handler holds the dependencies.
type Handler struct {
	Persister *Persister
	Webhooks  webhooks.Manager
}

// UpdateEmail hands the change to the webhooks before the commit.
func (h *Handler) UpdateEmail(userID, email string) error {
	return h.Persister.Transaction(func(tx *sql.Tx) error {
		if _, err := tx.Exec("UPDATE users SET email = $2 WHERE id = $1", userID, email); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		notify.NotifyUserChange(tx, h.Webhooks, userID) // want txrpc
		return nil
	})
}

// DeleteUser triggers the webhooks directly.
func (h *Handler) DeleteUser(userID string) error {
	return h.Persister.Transaction(func(tx *sql.Tx) error {
		if _, err := tx.Exec("DELETE FROM users WHERE id = $1", userID); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		notify.TriggerWebhooks(tx, h.Webhooks, "user.delete", userID) // want txrpc
		return nil
	})
}

// negative: the event goes to the outbox in the same transaction.
func (h *Handler) UpdateEmailOutbox(userID, email string) error {
	return h.Persister.Transaction(func(tx *sql.Tx) error {
		if _, err := tx.Exec("UPDATE users SET email = $2 WHERE id = $1", userID, email); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		return outbox.Publish(tx, "user.update", userID)
	})
}

// negative: the webhooks are told after the commit.
func (h *Handler) UpdateEmailAfterCommit(db *sql.DB, userID, email string) error {
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.Exec("UPDATE users SET email = $2 WHERE id = $1", userID, email); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	notify.NotifyUserChange(nil, h.Webhooks, userID)
	return nil
}
