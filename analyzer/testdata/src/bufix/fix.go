// Package bufix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package bufix

import (
	"context"
	"database/sql"
)

func paid(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE payments SET status = 'PAID' WHERE id = $1", id) //idemlint:ignore blindupdat single writer // want `idemlint:ignore names no rule "blindupdat"; did you mean blindupdate\?` `a state transition without compare-and-set`
	return err
}
