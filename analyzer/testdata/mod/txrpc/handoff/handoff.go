// Package handoff: work handed to another goroutine inside a transaction
// (a goroutine started, a worker fed through a channel) that does network
// I/O is reported as a hand-off before commit; a transactional outbox and
// a hand-off after the commit are not.
package handoff

import (
	"context"
	"database/sql"

	"example.com/orm/netx"
	"example.com/orm/txrpc/handoff/outbox"
	"example.com/orm/txrpc/handoff/webhooks"
)

// NotifyUserChange hands the change to the webhook worker.
func NotifyUserChange(m *webhooks.Manager, id string) {
	m.Trigger("user.update:" + id)
}

// UpdateEmail triggers the webhook of a change that may still roll back.
func UpdateEmail(ctx context.Context, db *sql.DB, m *webhooks.Manager, id, email string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE users SET email = $2 WHERE id = $1", id, email); err != nil {
		return err
	}
	NotifyUserChange(m, id) // want `handoff.NotifyUserChange \(called at \S+\) hands work to another goroutine \(a goroutine started at webhooks.go:\d+:\d+\) that may do network I/O .*a hand-off before the database transaction begun at \S+ commits: .*dual write.*outbox table in the same transaction`
	return tx.Commit()
}

// UpdateEmailAfterCommit hands off after the commit.
func UpdateEmailAfterCommit(ctx context.Context, db *sql.DB, m *webhooks.Manager, id, email string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE users SET email = $2 WHERE id = $1", id, email); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	NotifyUserChange(m, id)
	return nil
}

// GoInTx starts the goroutine itself.
func GoInTx(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE users SET verified = true WHERE id = $1", id); err != nil {
		return err
	}
	go netx.Notify(context.WithoutCancel(ctx), id) // want `a goroutine started at \S+ runs netx.Notify, which may do network I/O .*a hand-off before the database transaction .*commits: .*outbox table`
	return tx.Commit()
}

// Outbox writes the event in the transaction.
func Outbox(ctx context.Context, db *sql.DB, id, email string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE users SET email = $2 WHERE id = $1", id, email); err != nil {
		return err
	}
	if err := outbox.Publish(ctx, tx, "user.update:"+id); err != nil {
		return err
	}
	return tx.Commit()
}
