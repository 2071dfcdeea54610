// Package adapters implements ports.Repo on database/sql.
package adapters

import (
	"context"
	"database/sql"

	"example.com/locks/ports"
)

type Repo struct{}

var _ ports.Repo = (*Repo)(nil)

func (r *Repo) LockOrder(ctx context.Context, tx *sql.Tx, id string) (*ports.Order, error) {
	var o ports.Order
	err := tx.QueryRowContext(ctx, "SELECT id, invoice_id, shipment_id, status FROM orders WHERE id = $1 FOR UPDATE", id).
		Scan(&o.ID, &o.InvoiceID, &o.ShipmentID, &o.Status)
	return &o, err
}

// Its one caller locks the order and checks its state under the lock.
func (r *Repo) SetOrderStatus(ctx context.Context, tx *sql.Tx, id, status string) error {
	_, err := tx.ExecContext(ctx, "UPDATE orders SET status = $1 WHERE id = $2", status, id) // silent
	return err
}

// Keyed by a field of the locked order (the invoice it names).
func (r *Repo) SetInvoiceStatus(ctx context.Context, tx *sql.Tx, invoiceID, status string) error {
	_, err := tx.ExecContext(ctx, "UPDATE invoices SET status = $1 WHERE id = $2", status, invoiceID) // silent
	return err
}

// One caller locks, another does not.
func (r *Repo) SetShipmentStatus(ctx context.Context, tx *sql.Tx, shipmentID, status string) error {
	_, err := tx.ExecContext(ctx, "UPDATE shipments SET status = $1 WHERE id = $2", status, shipmentID) // want blindupdate
	return err
}

// Its caller locks the order but never reads its state.
func (r *Repo) SetRefundStatus(ctx context.Context, tx *sql.Tx, orderID, status string) error {
	_, err := tx.ExecContext(ctx, "UPDATE orders SET refund_status = $1 WHERE id = $2", status, orderID) // want blindupdate
	return err
}

// Its caller commits the transaction (releasing the lock) first.
func (r *Repo) SetNoteStatus(ctx context.Context, tx *sql.Tx, orderID, status string) error {
	_, err := tx.ExecContext(ctx, "UPDATE orders SET note_status = $1 WHERE id = $2", status, orderID) // want blindupdate
	return err
}

// FOR UPDATE on the pool, outside a transaction: the lock ends with the
// SELECT.
func (r *Repo) LockOrderOnPool(ctx context.Context, db *sql.DB, id string) (*ports.Order, error) {
	var o ports.Order
	err := db.QueryRowContext(ctx, "SELECT id, status FROM orders WHERE id = $1 FOR UPDATE", id).Scan(&o.ID, &o.Status)
	return &o, err
}

// Its caller "locks" the order on the pool: no lock is held at the call.
func (r *Repo) SetAuditStatus(ctx context.Context, db *sql.DB, orderID, status string) error {
	_, err := db.ExecContext(ctx, "UPDATE orders SET audit_status = $1 WHERE id = $2", status, orderID) // want blindupdate
	return err
}
