// Package queries holds idem's SQL: the PostgreSQL schema of the record
// table and the queries that sqlc compiles into runtime/pgstore.
//
// Regenerate the Go code after changing a .sql file with
//
//	go -C tools tool sqlc generate -f ../sqlc.yaml
//
// (scripts/test.sh fails when the committed code drifts).
package queries

import _ "embed"

// Schema is the migration that creates the record table and its indexes.
// It is idempotent (CREATE ... IF NOT EXISTS).
//
//go:embed schema.sql
var Schema string
