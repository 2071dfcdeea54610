// Package buflow holds blindupdate's cases of SQL text reached through data
// flow (a local variable, one built in steps, a package constant or
// variable, fmt.Sprintf with a constant format, a field of a query struct, a
// squirrel builder). Each positive case is followed by a must-not-flag twin:
// a text the analysis cannot determine (different texts on different paths,
// a variable reassigned, a field written elsewhere) is silent.
package buflow

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sq "github.com/Masterminds/squirrel"
	"github.com/jackc/pgx/v5/pgxpool"
)

var errLost = errors.New("lost the race")

// 1. The payout service's shape: the text in a local variable, the
// affected-row count dropped.
func updatePayoutStatus(ctx context.Context, pool *pgxpool.Pool, ref, status, providerRef string) error {
	query := "UPDATE payouts SET status = $2, provider_reference = $1, updated_at = now() WHERE reference = $3"
	_, err := pool.Exec(ctx, query, providerRef, status, ref) // want `\(\*pgxpool.Pool\).Exec \(called at buflow\.go:25:12\) runs "UPDATE payouts SET status = \$2, provider_reference = \$1, updated_at = now\(\) WHERE reference = \$3", a state transition without compare-and-set`
	return err
}

// Different texts on different paths: not determined, silent.
func updatePayoutStatusEither(ctx context.Context, pool *pgxpool.Pool, ref, status string, guarded bool) error {
	query := "UPDATE payouts SET status = $1 WHERE reference = $2"
	if guarded {
		query = "UPDATE payouts SET status = $1 WHERE reference = $2 AND status = 'PROCESSING'"
	}
	_, err := pool.Exec(ctx, query, status, ref)
	return err
}

// 2. Built in two steps with +=.
func markPayoutFailed(ctx context.Context, db *sql.DB, ref string) {
	q := "UPDATE payouts SET status = 'FAILED'"
	q += " WHERE reference = $1"
	db.ExecContext(ctx, q, ref) // want `\(\*sql.DB\).ExecContext \(called at buflow\.go:43:2\) runs "UPDATE payouts SET status = 'FAILED' WHERE reference = \$1"`
}

// The guard appended on one path only: silent.
func markPayoutFailedMaybeGuarded(ctx context.Context, db *sql.DB, ref string, guarded bool) {
	q := "UPDATE payouts SET status = 'FAILED' WHERE reference = $1"
	if guarded {
		q += " AND status = 'PROCESSING'"
	}
	db.ExecContext(ctx, q, ref)
}

// 3. Built from another variable and a package constant.
const payoutsTable = "payouts"

func markPayoutSent(ctx context.Context, db *sql.DB, ref string) {
	set := "UPDATE " + payoutsTable + " SET status = 'SENT'"
	query := set + " WHERE reference = $1"
	db.ExecContext(ctx, query, ref) // want `runs "UPDATE payouts SET status = 'SENT' WHERE reference = \$1"`
}

// Reassigned after its use: the first text is blind, the second is a
// compare-and-set whose count is read; neither is reported from the other.
func markPayoutSentTwice(ctx context.Context, db *sql.DB, ref string) error {
	query := "UPDATE payouts SET status = 'SENT' WHERE reference = $1 AND status = 'PROCESSING'"
	res, err := db.ExecContext(ctx, query, ref)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	query = "UPDATE payouts SET status = 'SENT' WHERE reference = $1"
	_ = query
	return nil
}

// 4. fmt.Sprintf with a constant format and constant arguments.
const statusColumn = "status"

func completePayout(ctx context.Context, db *sql.DB, ref string) {
	q := fmt.Sprintf("UPDATE %s SET %s = 'COMPLETED' WHERE reference = $1", payoutsTable, statusColumn)
	db.ExecContext(ctx, q, ref) // want `runs "UPDATE payouts SET status = 'COMPLETED' WHERE reference = \$1"`
}

// An argument that is not constant: not determined, silent.
func completeRow(ctx context.Context, db *sql.DB, table, ref string) {
	q := fmt.Sprintf("UPDATE %s SET status = 'COMPLETED' WHERE reference = $1", table)
	db.ExecContext(ctx, q, ref)
}

// 5. A package variable never written again, and a field of a package
// query struct.
var cancelPayoutSQL = "UPDATE payouts SET status = 'CANCELLED' WHERE reference = $1"

var payoutQueries = struct {
	refund string
	guard  string
}{
	refund: "UPDATE payouts SET status = 'REFUNDED' WHERE reference = $1",
	guard:  "UPDATE payouts SET status = 'REFUNDED' WHERE reference = $1 AND status = 'COMPLETED'",
}

func cancelPayout(ctx context.Context, db *sql.DB, ref string) {
	db.ExecContext(ctx, cancelPayoutSQL, ref) // want `runs "UPDATE payouts SET status = 'CANCELLED' WHERE reference = \$1"`
}

func refundPayout(ctx context.Context, db *sql.DB, ref string) {
	db.ExecContext(ctx, payoutQueries.refund, ref) // want `runs "UPDATE payouts SET status = 'REFUNDED' WHERE reference = \$1"`
}

func refundPayoutGuarded(ctx context.Context, db *sql.DB, ref string) error {
	res, err := db.ExecContext(ctx, payoutQueries.guard, ref)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	return nil
}

// A package variable written by a function: silent.
var holdPayoutSQL = "UPDATE payouts SET status = 'HELD' WHERE reference = $1"

// UseGuardedHold switches the hold to a compare-and-set.
func UseGuardedHold() {
	holdPayoutSQL = "UPDATE payouts SET status = 'HELD' WHERE reference = $1 AND status = 'PENDING'"
}

func holdPayout(ctx context.Context, db *sql.DB, ref string) {
	db.ExecContext(ctx, holdPayoutSQL, ref)
}

// 6. A field of a local query struct.
type query struct {
	sql  string
	args []any
}

func retryPayout(ctx context.Context, db *sql.DB, ref string) {
	q := query{sql: "UPDATE payouts SET status = 'RETRYING' WHERE reference = $1", args: []any{ref}}
	db.ExecContext(ctx, q.sql, q.args...) // want `runs "UPDATE payouts SET status = 'RETRYING' WHERE reference = \$1"`
}

// The field written again before the call: silent.
func retryPayoutGuarded(ctx context.Context, db *sql.DB, ref string, guarded bool) {
	q := query{sql: "UPDATE payouts SET status = 'RETRYING' WHERE reference = $1", args: []any{ref}}
	if guarded {
		q.sql += " AND status = 'FAILED'"
	}
	db.ExecContext(ctx, q.sql, q.args...)
}

// A variable whose address is taken may be written through it: silent.
func setText(q *string) { *q += " AND status = 'PENDING'" }

func approvePayout(ctx context.Context, db *sql.DB, ref string) {
	q := "UPDATE payouts SET status = 'APPROVED' WHERE reference = $1"
	setText(&q)
	db.ExecContext(ctx, q, ref)
}

// A variable written in a closure: silent.
func approvePayoutLater(ctx context.Context, db *sql.DB, ref string, guard bool) {
	q := "UPDATE payouts SET status = 'APPROVED' WHERE reference = $1"
	addGuard := func() { q += " AND status = 'PENDING'" }
	if guard {
		addGuard()
	}
	db.ExecContext(ctx, q, ref)
}

// A variable defined in a loop and used in the same iteration.
func settleAll(ctx context.Context, db *sql.DB, refs []string) {
	for _, ref := range refs {
		q := "UPDATE payouts SET status = 'SETTLED' WHERE reference = $1"
		db.ExecContext(ctx, q, ref) // want `runs "UPDATE payouts SET status = 'SETTLED' WHERE reference = \$1"`
	}
}

// Appended to inside the loop: silent.
func settleAllGrowing(ctx context.Context, db *sql.DB, refs []string) {
	q := "UPDATE payouts SET status = 'SETTLED' WHERE reference = $1"
	for _, ref := range refs {
		db.ExecContext(ctx, q, ref)
		q += " AND status = 'PENDING'"
	}
}

// 7. A squirrel builder whose text is constant: run through RunWith, or
// turned into text with ToSql.
func failPayoutBuilder(ctx context.Context, db *sql.DB, ref string) {
	sq.Update("payouts").Set("status", "FAILED").Where(sq.Eq{"reference": ref}).RunWith(db).ExecContext(ctx) // want `runs "UPDATE payouts SET status = 'FAILED' WHERE reference = \?"`
}

func failPayoutToSQL(ctx context.Context, db *sql.DB, ref string) error {
	query, args, err := sq.StatementBuilder.PlaceholderFormat(sq.Dollar).Update("payouts").
		Set("status", "FAILED").Set("updated_at", "now").Where("reference = ?", ref).ToSql()
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, query, args...) // want `runs "UPDATE payouts SET status = 'FAILED', updated_at = 'now' WHERE reference = \?"`
	return err
}

// The expected state in the WHERE, and the count read: silent.
func failPayoutBuilderCAS(ctx context.Context, db *sql.DB, ref string) error {
	res, err := sq.Update("payouts").Set("status", "FAILED").
		Where(sq.Eq{"reference": ref, "status": "PROCESSING"}).RunWith(db).ExecContext(ctx)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	return nil
}

// A builder extended on one path: not determined, silent.
func failPayoutBuilderMaybe(ctx context.Context, db *sql.DB, ref string, guarded bool) {
	b := sq.Update("payouts").Set("status", "FAILED").Where(sq.Eq{"reference": ref})
	if guarded {
		b = b.Where("status = 'PROCESSING'")
	}
	b.RunWith(db).ExecContext(ctx)
}

// A WHERE given by a variable: silent.
func failPayoutBuilderPred(ctx context.Context, db *sql.DB, pred sq.Eq) {
	sq.Update("payouts").Set("status", "FAILED").Where(pred).RunWith(db).ExecContext(ctx)
}

// 8. SetMap of a map literal with constant keys: squirrel sets its
// columns in sorted order.
func failPayoutSetMap(ctx context.Context, db *sql.DB, ref, reason string) {
	sq.Update("payouts").SetMap(map[string]interface{}{"status": "FAILED", "failure_reason": reason}).Where(sq.Eq{"reference": ref}).RunWith(db).ExecContext(ctx) // want `runs "UPDATE payouts SET failure_reason = \?, status = 'FAILED' WHERE reference = \?"`
}

// The expected state in the WHERE, and the count read: silent.
func failPayoutSetMapCAS(ctx context.Context, db *sql.DB, ref string) error {
	res, err := sq.Update("payouts").SetMap(map[string]interface{}{"status": "FAILED"}).
		Where(sq.Eq{"reference": ref, "status": "PROCESSING"}).RunWith(db).ExecContext(ctx)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	return nil
}

// A map given by a variable: not determined, silent.
func failPayoutSetMapVar(ctx context.Context, db *sql.DB, ref string, set map[string]interface{}) {
	sq.Update("payouts").SetMap(set).Where(sq.Eq{"reference": ref}).RunWith(db).ExecContext(ctx)
}
