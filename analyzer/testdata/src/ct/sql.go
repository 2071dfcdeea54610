// Package ct holds checkthenact's cases: each positive case is followed by
// its must-not-flag twin.
package ct

import (
	"context"
	"database/sql"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var errDuplicate = errors.New("duplicate request")

// 1. SELECT, then INSERT when sql.ErrNoRows.
func claim(ctx context.Context, db *sql.DB, key string) error {
	var state string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key) // want `\(\*sql.DB\).ExecContext inserts into idempotency_keys \("INSERT INTO idempotency_keys \(key, state\) VALUES \(\$1, 'PROCESSING'\)"\) on the not-found path`
		return err
	}
	return err
}

func claimAtomic(ctx context.Context, db *sql.DB, key string) error {
	res, err := db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING') ON CONFLICT (key) DO NOTHING", key)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errDuplicate
	}
	return nil
}

// 2. The found path returns first; pgx.
func claimPgx(ctx context.Context, pool *pgxpool.Pool, key string) error {
	var id int64
	err := pool.QueryRow(ctx, "SELECT id FROM idempotency_records WHERE idempotency_key = $1", key).Scan(&id)
	if err == nil {
		return errDuplicate
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	_, err = pool.Exec(ctx, "INSERT INTO idempotency_records (idempotency_key) VALUES ($1)", key) // want `\(\*pgxpool.Pool\).Exec inserts into idempotency_records`
	return err
}

// The insert is on the found path (after err != nil returned): another
// attempt row, not a claim of the key.
func foundPath(ctx context.Context, pool *pgxpool.Pool, key string) error {
	var id int64
	err := pool.QueryRow(ctx, "SELECT id FROM idempotency_records WHERE idempotency_key = $1", key).Scan(&id)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "INSERT INTO idempotency_records (idempotency_key, parent) VALUES ($1, $2)", key+"-retry", id)
	return err
}

// 3. SELECT EXISTS on a consumed-messages table.
func consume(ctx context.Context, tx *sql.Tx, msgID string) error {
	var exists bool
	if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM processed_messages WHERE message_id = $1)", msgID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := tx.ExecContext(ctx, "INSERT INTO processed_messages (message_id) VALUES ($1)", msgID); err != nil { // want `\(\*sql.Tx\).ExecContext inserts into processed_messages`
			return err
		}
	}
	return nil
}

func consumeAtomic(ctx context.Context, tx *sql.Tx, msgID string) (bool, error) {
	res, err := tx.ExecContext(ctx, "INSERT INTO processed_messages (message_id) VALUES ($1) ON CONFLICT DO NOTHING", msgID)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// 4. count(*) == 0.
func dedupCount(ctx context.Context, db *sql.DB, id string) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dedup_entries WHERE request_id = $1", id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		_, err := db.ExecContext(ctx, "INSERT INTO dedup_entries (request_id) VALUES ($1)", id) // want `inserts into dedup_entries .* on the not-found path of a plain read of the same table \(\(\*sql.DB\).QueryRowContext at sql.go:91:`
		return err
	}
	return errDuplicate
}

func otherTable(ctx context.Context, db *sql.DB, id string) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dedup_entries WHERE request_id = $1", id).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		_, err := db.ExecContext(ctx, "INSERT INTO audit_log (request_id) VALUES ($1)", id)
		return err
	}
	return nil
}

// 5. A switch on the error.
func switchErr(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idem_requests WHERE key = ?", key).Scan(&st)
	switch err {
	case nil:
		return errDuplicate
	case sql.ErrNoRows:
		_, err = db.ExecContext(ctx, "INSERT INTO idem_requests (key, state) VALUES (?, 'PROCESSING')", key) // want `inserts into idem_requests \("INSERT INTO idem_requests \(key, state\) VALUES \(\?, 'PROCESSING'\)"\)`
	}
	return err
}

// MySQL's INSERT IGNORE claims atomically.
func switchErrIgnore(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idem_requests WHERE key = ?", key).Scan(&st)
	switch err {
	case nil:
		return errDuplicate
	case sql.ErrNoRows:
		_, err = db.ExecContext(ctx, "INSERT IGNORE INTO idem_requests (key, state) VALUES (?, 'PROCESSING')", key)
	}
	return err
}

// 6. The table is not named for keys, but the check reads the key column.
func payOnce(ctx context.Context, db *sql.DB, key string, amount int64) error {
	var id int64
	err := db.QueryRowContext(ctx, "SELECT id FROM payments WHERE idempotency_key = $1", key).Scan(&id)
	if err != sql.ErrNoRows {
		return err
	}
	_, err = db.ExecContext(ctx, "INSERT INTO payments (idempotency_key, amount) VALUES ($1, $2)", key, amount) // want `inserts into payments`
	return err
}

// Not an idempotency record: a user looked up by email.
func signup(ctx context.Context, db *sql.DB, email string) error {
	var id int64
	err := db.QueryRowContext(ctx, "SELECT id FROM users WHERE email = $1", email).Scan(&id)
	if err != sql.ErrNoRows {
		return err
	}
	_, err = db.ExecContext(ctx, "INSERT INTO users (email) VALUES ($1)", email)
	return err
}

// 7. An effect between the check and the insert: tokenorder's finding,
// not this rule's.
func effectBetween(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		resp, err := http.Post("https://psp.example/charge", "application/json", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'SUCCESS')", key)
		return err
	}
	return err
}

// 8. SELECT .. FOR UPDATE in the same shape stays silent (precision: a
// serializing read we do not second-guess).
func forUpdate(ctx context.Context, tx *sql.Tx, key string) error {
	var st string
	err := tx.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1 FOR UPDATE", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = tx.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

// 9. The check in the if statement's init, found path leaves.
func initCheck(ctx context.Context, db *sql.DB, nonce string) error {
	var seen string
	if err := db.QueryRowContext(ctx, "SELECT nonce FROM nonces WHERE nonce = $1", nonce).Scan(&seen); err == nil {
		return errDuplicate
	}
	_, err := db.ExecContext(ctx, "INSERT INTO nonces (nonce) VALUES ($1)", nonce) // want `inserts into nonces`
	return err
}

func initCheckAtomic(ctx context.Context, db *sql.DB, nonce string) error {
	var seen string
	if err := db.QueryRowContext(ctx, "SELECT nonce FROM nonces WHERE nonce = $1", nonce).Scan(&seen); err == nil {
		return errDuplicate
	}
	_, err := db.ExecContext(ctx, "INSERT INTO nonces (nonce) VALUES ($1) ON CONFLICT (nonce) DO NOTHING", nonce)
	return err
}

// 10. Suppressed with a reason; and a directive without one.
func suppressed(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		//idemlint:ignore checkthenact the caller holds an advisory lock on the key
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')", key)
	}
	return err
}

func noReason(ctx context.Context, db *sql.DB, key string) error {
	var st string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		//idemlint:ignore checkthenact // want `idemlint:ignore checkthenact needs a reason`
		_, err = db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'NEW')", key) // want `inserts into idempotency_keys \("INSERT INTO idempotency_keys \(key, state\) VALUES \(\$1, 'NEW'\)"\)`
	}
	return err
}
