// Package store is the gorm payment store: a transaction runner layered
// on gorm's, and domain.Payments.
package store

import (
	"context"

	"gorm.io/gorm"

	"example.com/orm/corpus/domain"
)

type Store struct{ DB *gorm.DB }

// InTx runs fn in a gorm transaction.
func (s *Store) InTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.DB.WithContext(ctx).Transaction(fn)
}

// Atomically hides the transaction from its callers entirely.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.InTx(ctx, func(tx *gorm.DB) error { return fn(ctx) })
}

// MarkPaymentFailed writes FAILED.
func (s *Store) MarkPaymentFailed(ctx context.Context, id string) error {
	return s.DB.WithContext(ctx).Model(&domain.Payment{ID: id}).Update("status", "FAILED").Error
}

func (s *Store) HandleFailedPayment(ctx context.Context, id string) error {
	return s.MarkPaymentFailed(ctx, id)
}

func (s *Store) ReleaseReservation(ctx context.Context, id string) error {
	return s.DB.WithContext(ctx).Exec("UPDATE reservations SET released = true WHERE payment_id = ?", id).Error
}
