// Package direct calls its helpers directly, in the package that declares
// them: a locker and a status writer, each a function of its own.
package direct

import (
	"context"
	"database/sql"
)

type ticket struct{ ID, State string }

func lockTicket(ctx context.Context, tx *sql.Tx, id string) (*ticket, error) {
	var t ticket
	err := tx.QueryRowContext(ctx, "SELECT id, state FROM tickets WHERE id = $1 FOR UPDATE", id).Scan(&t.ID, &t.State)
	return &t, err
}

// Its one caller locks the ticket, by the id it is given, and switches on
// its state under the lock.
func setTicketState(ctx context.Context, tx *sql.Tx, id, state string) error {
	_, err := tx.ExecContext(ctx, "UPDATE tickets SET state = $1 WHERE id = $2", state, id) // silent
	return err
}

func Close(ctx context.Context, db *sql.DB, id string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	t, err := lockTicket(ctx, tx, id)
	if err != nil {
		return err
	}
	switch t.State {
	case "CLOSED":
		return nil
	}
	if err := setTicketState(ctx, tx, id, "CLOSED"); err != nil {
		return err
	}
	return tx.Commit()
}
