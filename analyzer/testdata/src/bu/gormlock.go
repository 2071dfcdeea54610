package bu

import (
	"context"
	"errors"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

var errState = errors.New("order is not pending")

// lockOrder takes the order's row lock: SELECT .. FOR UPDATE through
// gorm's Clauses(clause.Locking{Strength: "UPDATE"}).
func lockOrder(tx *gorm.DB, id string) (*Order, error) { // want lockOrder:`rowlocker\(\[\*\]\)`
	var o Order
	if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).First(&o).Error; err != nil {
		return nil, err
	}
	return &o, nil
}

// lockedOrder locks through a second helper.
func lockedOrder(tx *gorm.DB, id string) (*Order, error) { return lockOrder(tx, id) } // want lockedOrder:`rowlocker\(\[\*\]\)`

// The row is locked by a helper and the state re-checked under the lock:
// the transition is serialized.
func gormShipLocked(ctx context.Context, db *gorm.DB, id string) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		o, err := lockedOrder(tx, id)
		if err != nil {
			return err
		}
		if o.State != "PAID" {
			return errState
		}
		return tx.Model(o).Update("state", "SHIPPED").Error
	})
}

// The lock taken in the function itself.
func gormShipLockedHere(ctx context.Context, db *gorm.DB, id string) error {
	return db.Transaction(func(tx *gorm.DB) error {
		var o Order
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&o, "id = ?", id).Error; err != nil {
			return err
		}
		if o.State != "PAID" {
			return errState
		}
		return tx.Model(&o).Update("state", "SHIPPED").Error
	})
}

// 19. a shared lock does not serialize two writers.
func gormShipShared(ctx context.Context, db *gorm.DB, id string) error {
	return db.Transaction(func(tx *gorm.DB) error {
		var o Order
		if err := tx.Clauses(clause.Locking{Strength: "SHARE"}).First(&o, "id = ?", id).Error; err != nil {
			return err
		}
		return tx.Model(&o).Update("state", "SHIPPED").Error // want `gorm Update at gormlock.go:62:23 sets state of Order with only the model's primary key as condition`
	})
}
