package t

import (
	"context"
	"database/sql"
	"errors"
)

type hold struct{ ID, SKU string }

func reserveStock(ctx context.Context, db *sql.DB, sku string) (*hold, error) {
	_, err := db.ExecContext(ctx, "UPDATE stock SET reserved = reserved + 1 WHERE sku = $1", sku)
	return &hold{SKU: sku}, err
}

// rollbackReservation releases the stock reserved for the order: a
// compensation.
func rollbackReservation(ctx context.Context, db *sql.DB, h *hold) error {
	_, err := db.ExecContext(ctx, "UPDATE stock SET reserved = reserved - 1 WHERE sku = $1", h.SKU)
	return err
}

// 26. a charge's error followed by a compensation through the service's
// own helper.
func chargeOrCompensate(ctx context.Context, db *sql.DB, pc PaymentClient, sku string) error {
	held, err := reserveStock(ctx, db, sku)
	if err != nil {
		return err
	}
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: sku}); err != nil {
		rollbackReservation(ctx, db, held) // want `the error of \(t\.PaymentClient\)\.Charge .* reaches an action at \S+ that marks the operation failed`
		return err
	}
	return nil
}

// 26'. the compensation after a timeout is told apart.
func chargeOrCompensateOK(ctx context.Context, db *sql.DB, pc PaymentClient, sku string) error {
	held, err := reserveStock(ctx, db, sku)
	if err != nil {
		return err
	}
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: sku}); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		rollbackReservation(ctx, db, held)
		return err
	}
	return nil
}
