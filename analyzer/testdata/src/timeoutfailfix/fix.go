// Package timeoutfailfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package timeoutfailfix

import (
	"context"
	"database/sql"

	"tc"
)

func charge(ctx context.Context, db *sql.DB, id string) error {
	if err := tc.Charge(ctx, id); err != nil {
		//idemlint:ignore timeoutfial the gateway never charges on error // want `idemlint:ignore names no rule "timeoutfial"; did you mean timeoutfail\?`
		db.ExecContext(ctx, "UPDATE payments SET state='FAILED' WHERE id=$1", id) // want `writes a FAILED status`
		return err
	}
	return nil
}
