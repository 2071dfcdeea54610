// Package buflag holds blindupdate's cases of a column named like a state
// (*_state, *_status) that holds a boolean flag: the WebAuthn
// authenticator's backup_state written back after a login, a
// notification's read status. The evidence is what the statement writes
// into it: a Go bool (or sql.NullBool, *bool) bound to its placeholder, or
// a SQL boolean literal. A flag is not a workflow state, and writing it
// blind overwrites no transition. Each silent case is followed by a twin
// that must stay reported: the same column name holding a string or an
// integer code, and a statement that also sets a real state column.
package buflag

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
)

type flags struct {
	BackupEligible bool
	BackupState    bool
}

type credential struct {
	SignCount    uint32
	CloneWarning bool
	Flags        flags
}

// 1. miniflux's shape: the text in a local variable, backup_state bound to
// a Go bool ($4), the count dropped. Silent.
func saveLogin(db *sql.DB, handle []byte, c *credential) error {
	query := `
		UPDATE webauthn_credentials
		SET last_seen_on = NOW(),
			sign_count = $1,
			clone_warning = $2,
			backup_eligible = $3,
			backup_state = $4
		WHERE handle = $5
	`
	_, err := db.Exec(query, c.SignCount, c.CloneWarning, c.Flags.BackupEligible, c.Flags.BackupState, handle)
	return err
}

// The same column bound to a string: a state by what it holds. Reported.
func saveLoginState(db *sql.DB, handle []byte, state string) error {
	query := `UPDATE webauthn_credentials SET last_seen_on = NOW(), backup_state = $1 WHERE handle = $2`
	_, err := db.Exec(query, state, handle) // want `\(\*sql.DB\).Exec \(called at buflag\.go:\d+:\d+\) runs "UPDATE webauthn_credentials SET last_seen_on = NOW\(\), backup_state = \$1 WHERE handle = \$2", a state transition without compare-and-set: it sets webauthn_credentials.backup_state`
	return err
}

// 2. ? placeholders, a *bool and a sql.NullBool. Silent.
func markRead(ctx context.Context, db *sql.DB, id int64, read *bool, seen sql.NullBool) {
	db.ExecContext(ctx, "UPDATE notifications SET read_status = ?, seen_state = ? WHERE id = ?", read, seen, id)
}

// A boolean SQL literal. Silent.
func archive(ctx context.Context, pool *pgxpool.Pool, id int64) {
	pool.Exec(ctx, "UPDATE notifications SET archived_state = TRUE WHERE id = $1", id)
}

// A flag beside a real state column: the state is still written blind.
// Reported, and the state column is the one named.
func archiveAndClose(ctx context.Context, pool *pgxpool.Pool, id int64, archived bool) {
	pool.Exec(ctx, "UPDATE tickets SET archived_state = $1, status = 'CLOSED' WHERE id = $2", archived, id) // want `runs "UPDATE tickets SET archived_state = \$1, status = 'CLOSED' WHERE id = \$2", a state transition without compare-and-set: it sets tickets.status`
}

// An integer code bound to a *_status column: a state machine's state may
// be an integer. Reported.
func setStatusCode(ctx context.Context, pool *pgxpool.Pool, id int64, code int) {
	pool.Exec(ctx, "UPDATE orders SET order_status = $1 WHERE id = $2", code, id) // want `it sets orders.order_status`
}

// Arguments spread from a slice: which value is bound is not known, so the
// name decides, as before. Reported.
func setSpread(ctx context.Context, db *sql.DB, args []any) {
	db.ExecContext(ctx, "UPDATE webauthn_credentials SET backup_state = $1 WHERE handle = $2", args...) // want `it sets webauthn_credentials.backup_state`
}
