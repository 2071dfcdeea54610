// Package templates holds what idemgen renders besides Go code: the SQL
// migration that creates the idempotency record table, for users who apply
// migrations with their own tool (`idemgen schema`).
package templates

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/idemkit/idem/queries"
)

//go:embed migration.sql.tmpl
var migrationText string

var migration = template.Must(template.New("migration.sql").Parse(migrationText))

// Migration renders the PostgreSQL migration of the record table: a header
// naming generator (idemgen's version), then the DDL that pgstore.Migrate
// applies ([queries.Schema]), byte for byte.
func Migration(generator string) (string, error) {
	var b strings.Builder
	err := migration.Execute(&b, struct{ Generator, Schema string }{generator, queries.Schema})
	if err != nil {
		return "", fmt.Errorf("templates: rendering the migration: %w", err)
	}
	return b.String(), nil
}
