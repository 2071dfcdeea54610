// Package queries holds idem's SQL: the PostgreSQL schema of the record
// table and the queries that sqlc compiles into runtime/pgstore.
//
// Regenerate the Go code after changing a .sql file with
//
//	scripts/sqlc.sh
//
// which runs the sqlc pinned in tools/go.mod and records the checksums of
// its inputs and outputs (runtime/pgstore/internal/db/sqlc.sum);
// scripts/test.sh fails when the committed code drifts.
package queries

import _ "embed"

// Schema is the migration that creates the record table and its indexes.
// It is idempotent (CREATE ... IF NOT EXISTS).
//
//go:embed schema.sql
var Schema string
