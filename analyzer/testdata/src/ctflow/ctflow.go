// Package ctflow holds checkthenact's cases of SQL text held in variables,
// constants and query structs; each positive case is followed by its
// must-not-flag twin.
package ctflow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

const keysTable = "idempotency_keys"

// 1. The read and the insert in local variables, one built with Sprintf.
func claim(ctx context.Context, db *sql.DB, key string) error {
	selectKey := "SELECT state FROM " + keysTable + " WHERE key = $1"
	var state string
	err := db.QueryRowContext(ctx, selectKey, key).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		insertKey := fmt.Sprintf("INSERT INTO %s (key, state) VALUES ($1, 'PROCESSING')", keysTable)
		_, err = db.ExecContext(ctx, insertKey, key) // want `\(\*sql.DB\).ExecContext inserts into idempotency_keys \("INSERT INTO idempotency_keys \(key, state\) VALUES \(\$1, 'PROCESSING'\)"\) on the not-found path`
		return err
	}
	return err
}

// The insert's text differs by path (one of them atomic): silent.
func claimEither(ctx context.Context, db *sql.DB, key string, atomic bool) error {
	var state string
	err := db.QueryRowContext(ctx, "SELECT state FROM idempotency_keys WHERE key = $1", key).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		insertKey := "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING')"
		if atomic {
			insertKey = "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING') ON CONFLICT (key) DO NOTHING"
		}
		_, err = db.ExecContext(ctx, insertKey, key)
		return err
	}
	return err
}

// 2. The statements in a package query struct.
var keyQueries = struct {
	find, insert, claim string
}{
	find:   "SELECT id FROM idempotency_records WHERE idempotency_key = $1",
	insert: "INSERT INTO idempotency_records (idempotency_key) VALUES ($1)",
	claim:  "INSERT INTO idempotency_records (idempotency_key) VALUES ($1) ON CONFLICT DO NOTHING",
}

func record(ctx context.Context, db *sql.DB, key string) error {
	var id int64
	err := db.QueryRowContext(ctx, keyQueries.find, key).Scan(&id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	_, err = db.ExecContext(ctx, keyQueries.insert, key) // want `\(\*sql.DB\).ExecContext inserts into idempotency_records`
	return err
}

func recordAtomic(ctx context.Context, db *sql.DB, key string) error {
	var id int64
	err := db.QueryRowContext(ctx, keyQueries.find, key).Scan(&id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	_, err = db.ExecContext(ctx, keyQueries.claim, key)
	return err
}
