// Package ports declares the repository the application calls.
package ports

import (
	"context"
	"database/sql"
)

type Order struct {
	ID, InvoiceID, ShipmentID, Status string
}

type Repo interface {
	LockOrder(ctx context.Context, tx *sql.Tx, id string) (*Order, error)
	SetOrderStatus(ctx context.Context, tx *sql.Tx, id, status string) error
	SetInvoiceStatus(ctx context.Context, tx *sql.Tx, invoiceID, status string) error
	SetShipmentStatus(ctx context.Context, tx *sql.Tx, shipmentID, status string) error
	SetRefundStatus(ctx context.Context, tx *sql.Tx, orderID, status string) error
	SetNoteStatus(ctx context.Context, tx *sql.Tx, orderID, status string) error
	LockOrderOnPool(ctx context.Context, db *sql.DB, id string) (*Order, error)
	SetAuditStatus(ctx context.Context, db *sql.DB, orderID, status string) error
}
