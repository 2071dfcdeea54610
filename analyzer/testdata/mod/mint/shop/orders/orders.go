// Package orders is a gorm order service that creates payments at a
// gateway, rolling back through utils.PanicIfErrorWithRollback.
package orders

import (
	"context"

	"gorm.io/gorm"

	"example.com/orm/mint/shop/gateway"
	"example.com/orm/mint/shop/utils"
)

type Order struct {
	ID     string
	Amount int64
	Status string
}

type PaymentRow struct {
	ID      string
	OrderID string
	URL     string
}

type Service struct {
	DB      *gorm.DB
	Gateway gateway.Gateway
}

// Checkout creates the order and the gateway's payment in one
// transaction: the payment is created while it is open.
func (s *Service) Checkout(ctx context.Context, o *Order) (string, error) {
	tx := s.DB.WithContext(ctx).Begin()
	err := tx.Create(o).Error
	utils.PanicIfErrorWithRollback(err, tx)
	p, err := s.Gateway.CreatePayment(ctx, o.ID, o.Amount) // want txrpc
	utils.PanicIfErrorWithRollback(err, tx)
	err = tx.Create(&PaymentRow{ID: p.ID, OrderID: o.ID, URL: p.URL}).Error
	utils.PanicIfErrorWithRollback(err, tx)
	tx.Commit()
	return p.URL, nil
}

// Retry creates a new payment for an unpaid order.
func (s *Service) Retry(ctx context.Context, id string) (string, error) {
	tx := s.DB.WithContext(ctx).Begin()
	var o Order
	err := tx.First(&o, "id = ?", id).Error
	utils.PanicIfErrorWithRollback(err, tx)
	err = tx.Model(&o).Update("status", "PENDING_PAYMENT").Error
	utils.PanicIfErrorWithRollback(err, tx)
	p, err := s.Gateway.CreatePayment(ctx, o.ID, o.Amount) // want txrpc
	utils.PanicIfErrorWithRollback(err, tx)
	tx.Commit()
	return p.URL, nil
}

// negative: CheckoutAfterCommit commits the order first.
func (s *Service) CheckoutAfterCommit(ctx context.Context, o *Order) (string, error) {
	tx := s.DB.WithContext(ctx).Begin()
	err := tx.Create(o).Error
	utils.PanicIfErrorWithRollback(err, tx)
	tx.Commit()
	p, err := s.Gateway.CreatePayment(ctx, o.ID, o.Amount)
	if err != nil {
		return "", err
	}
	return p.URL, s.DB.WithContext(ctx).Create(&PaymentRow{ID: p.ID, OrderID: o.ID, URL: p.URL}).Error
}
