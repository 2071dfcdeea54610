package bu

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/plugin/optimisticlock"
)

type Payment struct {
	gorm.Model
	OrderNo string
	Status  string
	Amount  int64
}

type Order struct {
	ID    string
	State string `gorm:"column:state"`
}

type Account struct {
	ID      string
	Status  string
	Version optimisticlock.Version
}

type Profile struct {
	ID   string
	Name string
}

// 13. Model(&p).Update("status", ..), result dropped.
func gormPaid(db *gorm.DB, p *Payment) {
	db.Model(p).Update("status", "PAID") // want `gorm Update at gorm\.go:36:14 sets status of Payment with only the model's primary key as condition and never reads RowsAffected`
}

func gormPaidCAS(db *gorm.DB, p *Payment) error {
	res := db.Model(p).Where("status = ?", "PROCESSING").Update("status", "PAID")
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return errLost
	}
	return nil
}

// 14. Where on the key, only .Error read.
func gormShip(ctx context.Context, db *gorm.DB, id string) error {
	if err := db.WithContext(ctx).Model(&Order{}).Where("id = ?", id).Update("state", "SHIPPED").Error; err != nil { // want `gorm Update at gorm\.go:52:68 sets state of Order with only id = \? as condition`
		return err
	}
	return nil
}

func gormShipChecked(ctx context.Context, db *gorm.DB, id string) error {
	res := db.WithContext(ctx).Model(&Order{}).Where("id = ?", id).Update("state", "SHIPPED")
	if res.Error == nil && res.RowsAffected == 0 {
		return errLost
	}
	return res.Error
}

// 15. Updates with a map literal.
func gormFail(db *gorm.DB, p *Payment, reason string) error {
	return db.Model(p).Updates(map[string]any{"status": "FAILED", "reason": reason}).Error // want `gorm Updates at gorm\.go:68:21 sets status of Payment`
}

func gormFailLocked(db *gorm.DB, p *Payment, reason string) error { // want gormFailLocked:`rowlocker\(\[\*\]\)`
	return db.Clauses(clause.Locking{Strength: "UPDATE"}).Model(p).Updates(map[string]any{"status": "FAILED", "reason": reason}).Error
}

// 16. Updates with a struct literal, the *gorm.DB kept but only its Error read.
func gormRefund(db *gorm.DB, p *Payment) error {
	res := db.Model(p).Updates(Payment{Status: "REFUNDED"}) // want `gorm Updates at gorm\.go:77:21 sets Status of Payment`
	return res.Error
}

func gormRefundVersioned(db *gorm.DB, a *Account) error {
	res := db.Model(a).Updates(Account{Status: "CLOSED"}) // optimisticlock.Version adds the version to the WHERE
	return res.Error
}

// 17. UpdateColumn.
func gormColumn(db *gorm.DB, o *Order) error {
	return db.Model(o).UpdateColumn("state", "DONE").Error // want `gorm UpdateColumn at gorm\.go:88:21 sets state of Order`
}

func gormNotState(db *gorm.DB, p *Profile) error {
	return db.Model(p).UpdateColumn("name", "x").Error
}

func gormNonLiteral(db *gorm.DB, p *Payment, v Payment) error {
	return db.Model(p).Updates(v).Error // which fields: unknown
}
