// Package db is the shop's data access, in the shape sqlc generates from
// query.sql (emit_interface: true). It is written out here so that the
// example builds without sqlc.
package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is a pgx pool, connection or transaction.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

// New returns the queries on db.
func New(db DBTX) *Queries { return &Queries{db: db} }

// Queries runs query.sql.
type Queries struct{ db DBTX }

// Querier is the interface of Queries.
type Querier interface {
	GetOrder(ctx context.Context, id string) (Order, error)
	MarkOrderPaid(ctx context.Context, arg MarkOrderPaidParams) (int64, error)
}

var _ Querier = (*Queries)(nil)

// Order is a row of orders.
type Order struct {
	ID          string
	CustomerID  string
	AmountCents int64
	Currency    string
	Status      string
	ChargeID    *string
}

const getOrder = `SELECT id, customer_id, amount_cents, currency, status, charge_id FROM orders WHERE id = $1`

// GetOrder reads an order.
func (q *Queries) GetOrder(ctx context.Context, id string) (Order, error) {
	var o Order
	err := q.db.QueryRow(ctx, getOrder, id).Scan(&o.ID, &o.CustomerID, &o.AmountCents, &o.Currency, &o.Status, &o.ChargeID)
	return o, err
}

const markOrderPaid = `UPDATE orders SET status = 'paid', charge_id = $2 WHERE id = $1 AND status = 'pending'`

// MarkOrderPaidParams are the parameters of MarkOrderPaid.
type MarkOrderPaidParams struct {
	ID       string
	ChargeID *string
}

// MarkOrderPaid marks a pending order paid; 0 rows when it was not pending.
func (q *Queries) MarkOrderPaid(ctx context.Context, arg MarkOrderPaidParams) (int64, error) {
	tag, err := q.db.Exec(ctx, markOrderPaid, arg.ID, arg.ChargeID)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
