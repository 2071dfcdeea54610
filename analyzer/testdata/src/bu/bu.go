// Package bu holds blindupdate's cases: each positive case is followed by
// its must-not-flag twin.
package bu

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var errLost = errors.New("lost the race")

// 1. database/sql, inline literal, count dropped with _.
func markPaid(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE payments SET status = 'PAID' WHERE id = $1", id) // want `\(\*sql.DB\).ExecContext \(called at bu\.go:19:12\) runs "UPDATE payments SET status = 'PAID' WHERE id = \$1", a state transition without compare-and-set`
	return err
}

func markPaidCAS(ctx context.Context, db *sql.DB, id string) error {
	res, err := db.ExecContext(ctx, "UPDATE payments SET status = 'PAID' WHERE id = $1 AND status = 'PROCESSING'", id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	return nil
}

// 2. The whole result dropped.
func markShipped(db *sql.DB, id int64) {
	db.Exec("UPDATE orders SET state = 'SHIPPED' WHERE id = ?", id) // want `\(\*sql.DB\).Exec \(called at bu\.go:36:2\) runs "UPDATE orders SET state = 'SHIPPED' WHERE id = \?"`
}

func markShippedVersioned(db *sql.DB, id, version int64) {
	db.Exec("UPDATE orders SET state = 'SHIPPED', version = version + 1 WHERE id = ? AND version = ?", id, version)
}

// 3. A named constant, pgx pool, assigned with =.
const setRefunded = `UPDATE refunds SET state = $2, updated_at = now() WHERE refund_id = $1`

func refund(ctx context.Context, pool *pgxpool.Pool, id, st string) error {
	var err error
	_, err = pool.Exec(ctx, setRefunded, id, st) // want `\(\*pgxpool.Pool\).Exec \(called at bu\.go:48:11\) runs "UPDATE refunds SET state = \$2, updated_at = now\(\) WHERE refund_id = \$1"`
	return err
}

func refundChecked(ctx context.Context, pool *pgxpool.Pool, id, st string) error {
	tag, err := pool.Exec(ctx, setRefunded, id, st)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errLost
	}
	return nil
}

// 4. pgx.Tx in an if statement.
func complete(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, "UPDATE idempotency_record SET state = 'SUCCESS', response_body = $2 WHERE identity_id = $1", key, "{}"); err != nil { // want `\(pgx.Tx\).Exec \(called at bu\.go:65:15\) runs "UPDATE idempotency_record SET state = 'SUCCESS', response_body = \$2 WHERE identity_id = \$1"`
		return err
	}
	return nil
}

// The seeds' fix: the expected state and the lease in the WHERE.
func completeCAS(ctx context.Context, tx pgx.Tx, key, owner string) error {
	if _, err := tx.Exec(ctx, "UPDATE idempotency_record SET state = 'SUCCESS' WHERE identity_id = $1 AND state = 'PROCESSING' AND (lease_expire_at > now() OR owner_id = $2)", key, owner); err != nil {
		return err
	}
	return nil
}

// 5. Two key columns, a *_status column.
func settle(ctx context.Context, db *sql.DB, merchant, orderNo string) error {
	_, err := db.ExecContext(ctx, `UPDATE trade_orders SET pay_status = 'SETTLED' WHERE merchant_id = $1 AND order_no = $2`, merchant, orderNo) // want `sets trade_orders.pay_status with a WHERE on the key only \(merchant_id = \$1 AND order_no = \$2\)`
	return err
}

func settleLocked(ctx context.Context, tx *sql.Tx, merchant, orderNo string) error { // want settleLocked:`rowlocker\(\[trade_orders\]\)`
	var st string
	if err := tx.QueryRowContext(ctx, `SELECT pay_status FROM trade_orders WHERE merchant_id = $1 AND order_no = $2 FOR UPDATE`, merchant, orderNo).Scan(&st); err != nil {
		return err
	}
	if st != "PAID" {
		return errLost
	}
	_, err := tx.ExecContext(ctx, `UPDATE trade_orders SET pay_status = 'SETTLED' WHERE merchant_id = $1 AND order_no = $2`, merchant, orderNo)
	return err
}

// 6. A constant concatenation.
const ordersTable = "orders"

func cancel(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE "+ordersTable+" SET status = $2 WHERE id = $1", id, "CANCELLED") // want `\(\*sql.DB\).ExecContext \(called at bu\.go:101:12\) runs "UPDATE orders SET status = \$2 WHERE id = \$1"`
	return err
}

func bulkCancel(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, "UPDATE "+ordersTable+" SET status = 'CANCELLED'") // no WHERE: a bulk update, not a transition of one record
	return err
}

// 7. Quoted identifiers.
func quoted(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, `UPDATE "public"."payments" SET "status" = 'FAILED' WHERE "id" = $1`, id) // want `runs "UPDATE \\"public\\".\\"payments\\" SET \\"status\\" = 'FAILED' WHERE \\"id\\" = \$1"`
	return err
}

func notState(ctx context.Context, db *sql.DB, id, name string) error {
	_, err := db.ExecContext(ctx, `UPDATE "public"."payments" SET "payer_name" = $2 WHERE "id" = $1`, id, name)
	return err
}

// 8. Several columns, the state among them.
func fail(ctx context.Context, db *sql.DB, id, reason string) error {
	_, err := db.ExecContext(ctx, "UPDATE payouts SET failure_reason = $2, status = 'FAILED', updated_at = now() WHERE payout_id = $1", id, reason) // want `sets payouts.status with a WHERE on the key only \(payout_id = \$1\)`
	return err
}

func failFromState(ctx context.Context, db *sql.DB, id string) error {
	_, err := db.ExecContext(ctx, "UPDATE payouts SET status = CASE WHEN status = 'PENDING' THEN 'FAILED' ELSE status END WHERE payout_id = $1", id)
	return err
}

// 9. An Exec-shaped method of the service's own interface.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func viaInterface(ctx context.Context, db Execer, id string) error {
	_, err := db.Exec(ctx, "UPDATE subscriptions SET state = 'ACTIVE' WHERE id = $1", id) // want `\(bu.Execer\).Exec \(called at bu\.go:138:12\) runs "UPDATE subscriptions SET state = 'ACTIVE' WHERE id = \$1"`
	return err
}

func viaInterfaceChecked(ctx context.Context, db Execer, id string) error {
	tag, err := db.Exec(ctx, "UPDATE subscriptions SET state = 'ACTIVE' WHERE id = $1", id)
	if err == nil && tag.RowsAffected() != 1 {
		return errLost
	}
	return err
}

// 10. A status code is not a state machine.
func lastCode(ctx context.Context, db *sql.DB, id string, code int) error {
	_, err := db.ExecContext(ctx, "UPDATE webhooks SET status_code = $2 WHERE id = $1", id, code)
	return err
}

// 11. Suppressed, with a reason.
func suppressed(ctx context.Context, db *sql.DB, id string) error {
	//idemlint:ignore blindupdate single writer: only the reconciler process updates this table
	_, err := db.ExecContext(ctx, "UPDATE ledger_batches SET status = 'CLOSED' WHERE id = $1", id)
	return err
}

// 12. The directive needs a reason.
func noReason(ctx context.Context, db *sql.DB, id string) error {
	//idemlint:ignore blindupdate // want `idemlint:ignore blindupdate needs a reason`
	_, err := db.ExecContext(ctx, "UPDATE ledger_batches SET status = 'OPEN' WHERE id = $1", id) // want `runs "UPDATE ledger_batches SET status = 'OPEN' WHERE id = \$1"`
	return err
}
