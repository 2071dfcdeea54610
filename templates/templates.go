// Package templates holds what idemgen renders besides Go code: the SQL
// migration that creates the idempotency record table, for users who apply
// migrations with their own tool (`idemgen schema`).
package templates

import _ "embed"

// Schema is the PostgreSQL migration of the record table. It is the same
// DDL that pgstore.Migrate applies (queries.Schema); a test keeps them
// byte for byte equal.
//
//go:embed schema.sql
var Schema string
