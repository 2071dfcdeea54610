// Package kflow holds tokenorder's cases of SQL text held in variables,
// package variables, fmt.Sprintf, query structs and squirrel builders;
// each positive case is followed by its must-not-flag twin.
package kflow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sq "github.com/Masterminds/squirrel"

	"kb"
)

var ErrDuplicate = errors.New("duplicate")

const tokenTable = "idempotency_keys"

// 1. The DELETE built with fmt.Sprintf, then the effect.
func deleteThenCharge(ctx context.Context, db *sql.DB, key string) error {
	q := fmt.Sprintf("DELETE FROM %s WHERE key = $1", tokenTable)
	if _, err := db.ExecContext(ctx, q, key); err != nil { // want `deleted at \S+ \(\(\*sql\.DB\)\.ExecContext\) before the effect it guards`
		return err
	}
	return kb.Charge(ctx, key)
}

// The table differs by path (one of them not a token table): silent.
func deleteEitherThenCharge(ctx context.Context, db *sql.DB, key string, session bool) error {
	table := tokenTable
	if session {
		table = "sessions"
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM "+table+" WHERE key = $1", key); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 2. The SELECT in a package query struct: a plain check before the effect.
var tokenQueries = struct {
	find, lock, insert string
}{
	find:   "SELECT count(*) FROM idempotency_keys WHERE key = $1",
	lock:   "SELECT count(*) FROM idempotency_keys WHERE key = $1 FOR UPDATE",
	insert: "INSERT INTO idempotency_keys(key) VALUES ($1)",
}

func checkThenCharge(ctx context.Context, db *sql.DB, key string) error {
	var n int
	db.QueryRowContext(ctx, tokenQueries.find, key).Scan(&n)
	if n > 0 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, key); err != nil { // want `runs after a non-atomic check of the idempotency token \(\(\*sql\.DB\)\.QueryRowContext`
		return err
	}
	_, err := db.ExecContext(ctx, tokenQueries.insert, key)
	return err
}

// SELECT .. FOR UPDATE from the same struct locks the row: silent.
func lockThenCharge(ctx context.Context, db *sql.DB, key string) error {
	var n int
	db.QueryRowContext(ctx, tokenQueries.lock, key).Scan(&n)
	if n > 0 {
		return ErrDuplicate
	}
	if err := kb.Charge(ctx, key); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, tokenQueries.insert, key)
	return err
}

// 3. A package variable never written again, and a local query struct.
var deleteTokenSQL = "DELETE FROM idempotency_keys WHERE key = $1"

type stmt struct{ text string }

func deleteVarThenCharge(ctx context.Context, db *sql.DB, key string) error {
	if _, err := db.ExecContext(ctx, deleteTokenSQL, key); err != nil { // want `deleted at \S+ \(\(\*sql\.DB\)\.ExecContext\) before the effect it guards`
		return err
	}
	return kb.Charge(ctx, key)
}

func deleteStmtThenCharge(ctx context.Context, db *sql.DB, key string) error {
	s := stmt{text: "DELETE FROM idempotency_keys WHERE key = $1"}
	if _, err := db.ExecContext(ctx, s.text, key); err != nil { // want `deleted at \S+ \(\(\*sql\.DB\)\.ExecContext\) before the effect it guards`
		return err
	}
	return kb.Charge(ctx, key)
}

// A package variable some function rewrites: silent.
var purgeSQL = "DELETE FROM idempotency_keys WHERE key = $1"

// UseSessions points the purge at the sessions table.
func UseSessions() { purgeSQL = "DELETE FROM sessions WHERE key = $1" }

func purgeThenCharge(ctx context.Context, db *sql.DB, key string) error {
	if _, err := db.ExecContext(ctx, purgeSQL, key); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// A query struct field rewritten on one path: silent.
func deleteStmtMaybeThenCharge(ctx context.Context, db *sql.DB, key string, session bool) error {
	s := stmt{text: "DELETE FROM idempotency_keys WHERE key = $1"}
	if session {
		s.text = "DELETE FROM sessions WHERE key = $1"
	}
	if _, err := db.ExecContext(ctx, s.text, key); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 5. The DELETE through a squirrel delete builder, then the effect; the
// builder's table a token table's or not.
func deleteBySquirrelThenCharge(ctx context.Context, db *sql.DB, key string) error {
	if _, err := sq.Delete(tokenTable).Where(sq.Eq{"key": key}).RunWith(db).ExecContext(ctx); err != nil { // want `deleted at \S+ \(\(squirrel\.DeleteBuilder\)\.ExecContext\) before the effect it guards`
		return err
	}
	return kb.Charge(ctx, key)
}

func deleteBySquirrelToSQLThenCharge(ctx context.Context, db *sql.DB, key string) error {
	q, args, err := sq.Delete("idempotency_keys").Where("key = ?", key).ToSql()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, q, args...); err != nil { // want `deleted at \S+ \(\(\*sql\.DB\)\.ExecContext\) before the effect it guards`
		return err
	}
	return kb.Charge(ctx, key)
}

func deleteSessionBySquirrelThenCharge(ctx context.Context, db *sql.DB, key string) error {
	if _, err := sq.Delete("sessions").Where(sq.Eq{"key": key}).RunWith(db).ExecContext(ctx); err != nil {
		return err
	}
	return kb.Charge(ctx, key)
}

// 6. A check, then the claim through a squirrel compare-and-set on the
// token table whose count is read: atomic, silent.
func checkThenClaimBySquirrel(ctx context.Context, db *sql.DB, key string) error {
	var n int
	db.QueryRowContext(ctx, tokenQueries.find, key).Scan(&n)
	if n > 0 {
		return ErrDuplicate
	}
	res, err := sq.Update(tokenTable).Set("state", "PROCESSING").Where(sq.Eq{"key": key, "state": "NEW"}).RunWith(db).ExecContext(ctx)
	if err != nil {
		return err
	}
	if c, _ := res.RowsAffected(); c != 1 {
		return ErrDuplicate
	}
	return kb.Charge(ctx, key)
}
