package ct

import (
	"context"
	"errors"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

type IdempotencyRecord struct {
	Key   string `gorm:"primaryKey"`
	State string
}

type IdempotencyKey struct {
	Key string
}

type Payment struct {
	ID     uint
	Amount int64
}

type Profile struct {
	ID   uint
	Name string
}

// 11. First, then Create when gorm.ErrRecordNotFound.
func gormClaim(db *gorm.DB, key string) error {
	var rec IdempotencyRecord
	err := db.Where("key = ?", key).First(&rec).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return db.Create(&IdempotencyRecord{Key: key, State: "PROCESSING"}).Error // want `gorm Create of IdempotencyRecord runs on the not-found path of a plain read of the same record \(gorm First at gorm.go:33:`
	}
	return err
}

func gormClaimAtomic(db *gorm.DB, key string) error {
	var rec IdempotencyRecord
	err := db.Where("key = ?", key).First(&rec).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		res := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&IdempotencyRecord{Key: key, State: "PROCESSING"})
		if res.Error == nil && res.RowsAffected == 0 {
			return errors.New("duplicate")
		}
		return res.Error
	}
	return err
}

// 12. Count == 0, then Create.
func gormCount(ctx context.Context, db *gorm.DB, key string) error {
	var n int64
	db.WithContext(ctx).Model(&IdempotencyKey{}).Where("key = ?", key).Count(&n)
	if n == 0 {
		db.WithContext(ctx).Create(&IdempotencyKey{Key: key}) // want `gorm Create of IdempotencyKey runs on the not-found path of a plain read of the same record \(gorm Count`
	}
	return nil
}

func gormCountOther(ctx context.Context, db *gorm.DB, key string) error {
	var n int64
	db.WithContext(ctx).Model(&IdempotencyKey{}).Where("key = ?", key).Count(&n)
	if n == 0 {
		db.WithContext(ctx).Create(&Payment{Amount: 1})
	}
	return nil
}

// 13. FirstOrCreate of an idempotency record.
func gormFirstOrCreate(db *gorm.DB, key string) error {
	var rec IdempotencyRecord
	return db.Where(IdempotencyRecord{Key: key}).FirstOrCreate(&rec).Error // want `gorm FirstOrCreate of IdempotencyRecord at gorm\.go:75:47 is a SELECT then an INSERT`
}

func gormFirstOrCreateProfile(db *gorm.DB, name string) error {
	var p Profile
	return db.Where(Profile{Name: name}).FirstOrCreate(&p).Error
}

// 14. RowsAffected == 0 of the kept *gorm.DB, inside a Transaction closure.
func gormTake(db *gorm.DB, key string) error {
	return db.Transaction(func(tx *gorm.DB) error {
		var rec IdempotencyRecord
		res := tx.Where("key = ?", key).Take(&rec)
		if res.RowsAffected == 0 {
			return tx.Create(&rec).Error // want `gorm Create of IdempotencyRecord runs on the not-found path of a plain read of the same record \(gorm Take`
		}
		return nil
	})
}

func gormTakeFound(db *gorm.DB, key string) error {
	return db.Transaction(func(tx *gorm.DB) error {
		var rec IdempotencyRecord
		res := tx.Where("key = ?", key).Take(&rec)
		if res.Error != nil {
			return res.Error
		}
		rec.State = "SEEN"
		return tx.Create(&IdempotencyRecord{Key: rec.Key + ":replay"}).Error
	})
}
