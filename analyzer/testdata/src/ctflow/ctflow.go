// Package ctflow holds checkthenact's cases of SQL text held in variables,
// constants and query structs; each positive case is followed by its
// must-not-flag twin.
package ctflow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sq "github.com/Masterminds/squirrel"
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

// 3. squirrel select and insert builders written as one chain.
func claimBySquirrel(ctx context.Context, db *sql.DB, key string) error {
	var state string
	err := sq.Select("state").From("idempotency_keys").Where(sq.Eq{"key": key}).RunWith(db).QueryRowContext(ctx).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = sq.Insert("idempotency_keys").Columns("key", "state").Values(key, "PROCESSING").RunWith(db).ExecContext(ctx) // want `ExecContext inserts into idempotency_keys \("INSERT INTO idempotency_keys \(key, state\) VALUES \(\?, 'PROCESSING'\)"\) on the not-found path`
		return err
	}
	return err
}

// ON CONFLICT in a Suffix: the insert is atomic, silent.
func claimBySquirrelOnConflict(ctx context.Context, db *sql.DB, key string) error {
	var state string
	err := sq.Select("state").From("idempotency_keys").Where(sq.Eq{"key": key}).RunWith(db).QueryRowContext(ctx).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = sq.Insert("idempotency_keys").Columns("key", "state").Values(key, "PROCESSING").
			Suffix("ON CONFLICT (key) DO NOTHING").RunWith(db).ExecContext(ctx)
		return err
	}
	return err
}

// The read takes a row lock (FOR UPDATE in a Suffix): silent.
func claimBySquirrelLocked(ctx context.Context, db *sql.DB, key string) error {
	var state string
	err := sq.Select("state").From("idempotency_keys").Where("key = ?", key).Suffix("FOR UPDATE").RunWith(db).QueryRowContext(ctx).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = sq.Insert("idempotency_keys").Columns("key", "state").Values(key, "PROCESSING").RunWith(db).ExecContext(ctx)
		return err
	}
	return err
}

// Through ToSql, with the placeholder format of a statement builder.
func recordBySquirrelToSQL(ctx context.Context, db *sql.DB, key string) error {
	psql := sq.StatementBuilder.PlaceholderFormat(sq.Dollar)
	q, args, err := psql.Select("id").From("idempotency_records").Where(sq.Eq{"idempotency_key": key}).ToSql()
	if err != nil {
		return err
	}
	var id int64
	err = db.QueryRowContext(ctx, q, args...).Scan(&id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	ins, iargs, err := psql.Insert("idempotency_records").Columns("idempotency_key").Values(key).ToSql()
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, ins, iargs...) // want `\(\*sql.DB\).ExecContext inserts into idempotency_records`
	return err
}

// Columns given as a slice: not determined, silent.
func claimBySquirrelSpread(ctx context.Context, db *sql.DB, key string, cols []string) error {
	var state string
	err := sq.Select("state").From("idempotency_keys").Where(sq.Eq{"key": key}).RunWith(db).QueryRowContext(ctx).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = sq.Insert("idempotency_keys").Columns(cols...).Values(key, "PROCESSING").RunWith(db).ExecContext(ctx)
		return err
	}
	return err
}
