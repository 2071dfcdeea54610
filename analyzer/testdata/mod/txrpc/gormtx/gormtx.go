// Package gormtx: gorm transactions (Transaction callbacks, Begin/Commit).
package gormtx

import (
	"context"

	"gorm.io/gorm"

	"example.com/orm/netx"
)

type Payment struct {
	ID    string
	State string
}

func TransactionCallback(ctx context.Context, db *gorm.DB, id string) error {
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Payment{ID: id}).Update("state", "PROCESSING").Error; err != nil {
			return err
		}
		return netx.Notify(ctx, id) // want `netx.Notify .*while the database transaction`
	})
}

func BeginCommit(ctx context.Context, db *gorm.DB, id string) error {
	tx := db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	defer tx.Rollback()
	if err := tx.Create(&Payment{ID: id, State: "PROCESSING"}).Error; err != nil {
		return err
	}
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit().Error
}

// AfterCommit commits first: silent.
func AfterCommit(ctx context.Context, db *gorm.DB, id string) error {
	tx := db.Begin()
	if err := tx.Create(&Payment{ID: id, State: "PROCESSING"}).Error; err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit().Error; err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}

// Scoped: a scope is not a transaction callback: silent.
func Scoped(ctx context.Context, db *gorm.DB, id string) error {
	var p Payment
	return db.Scopes(func(d *gorm.DB) *gorm.DB {
		_ = netx.Notify(ctx, id)
		return d.Where("id = ?", id)
	}).First(&p).Error
}

// Store hides gorm's Transaction behind a helper: an inferred runner.
type Store struct{ db *gorm.DB }

func (s *Store) InTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}

// Atomically hands its callback to InTx inside a closure of its own: a
// runner through two layers.
func (s *Store) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.InTx(ctx, func(tx *gorm.DB) error {
		return fn(ctx)
	})
}

func ThroughHelper(ctx context.Context, s *Store, id string) error {
	return s.Atomically(ctx, func(ctx context.Context) error {
		return netx.Notify(ctx, id) // want `netx.Notify .*while the database transaction`
	})
}
