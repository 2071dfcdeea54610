// Package ormfail: failure actions written through ORMs, helpers and
// interfaces after a network call's error.
package ormfail

import (
	"context"
	"errors"

	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"gorm.io/gorm"

	"example.com/orm/netx"
)

type Payment struct {
	ID     string
	Status string
}

type Invoice struct {
	ID    int64
	State string
}

type LedgerEntry struct {
	ID     int64
	Kind   string
	Amount int64
}

func GormUpdatesMap(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		db.Model(p).Updates(map[string]any{"Status": "FAILED"}) // want `writes a FAILED status`
		return err
	}
	return nil
}

func GormUpdateColumn(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		return db.Model(p).Update("status", "failed").Error // want `writes a FAILED status`
	}
	return nil
}

func BunModel(ctx context.Context, db *bun.DB, inv *Invoice) error {
	if err := netx.Charge(ctx, "inv", 10); err != nil {
		inv.State = "error"
		_, _ = db.NewUpdate().Model(inv).WherePK().Exec(ctx) // want `writes a FAILED status`
		return err
	}
	return nil
}

func GormReversal(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		return db.Create(&LedgerEntry{Kind: "reversal", Amount: -10}).Error // want `inserts a refund or reversal entry`
	}
	return nil
}

func SQLRefund(ctx context.Context, db *sqlx.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		db.MustExec("INSERT INTO refunds (payment_id, amount) VALUES ($1, $2)", p.ID, 10) // want `inserts a refund or reversal entry`
		return err
	}
	return nil
}

// Payments is the service's store, behind an interface.
type Payments interface {
	MarkPaymentFailed(ctx context.Context, id string) error
	HandleFailedPayment(ctx context.Context, id string) error
	ReleaseReservation(ctx context.Context, id string) error
}

func MarkFailed(ctx context.Context, s Payments, id string) error {
	if err := netx.Charge(ctx, id, 10); err != nil {
		_ = s.MarkPaymentFailed(ctx, id) // want `marks the operation failed`
		return err
	}
	return nil
}

func HandleFailed(ctx context.Context, s Payments, id string) error {
	err := netx.Charge(ctx, id, 10)
	if err != nil {
		return s.HandleFailedPayment(ctx, id) // want `marks the operation failed`
	}
	return nil
}

func Release(ctx context.Context, s Payments, id string) error {
	if err := netx.Charge(ctx, id, 10); err != nil {
		return s.ReleaseReservation(ctx, id) // want `marks the operation failed`
	}
	return nil
}

// Keys is a Redis-backed repository of idempotency keys.
type Keys interface {
	Del(ctx context.Context, key string) error
}

func DeleteKey(ctx context.Context, keys Keys, idemKey, id string) error {
	if err := netx.Charge(ctx, id, 10); err != nil {
		_ = keys.Del(ctx, idemKey) // want `deletes the idempotency token`
		return err
	}
	return nil
}

// Gateway can be asked what happened to a charge.
type Gateway interface {
	GetChargeStatus(ctx context.Context, id string) (string, error)
}

// AskFirst asks the downstream whether the charge happened before
// failing: the correct pattern, silent.
func AskFirst(ctx context.Context, db *gorm.DB, gw Gateway, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		st, qerr := gw.GetChargeStatus(ctx, p.ID)
		if qerr == nil && st == "not_found" {
			db.Model(p).Updates(map[string]any{"Status": "FAILED"})
		}
		return err
	}
	return nil
}

// TimeoutFirst tells a timeout apart: silent.
func TimeoutFirst(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return db.Model(p).Update("status", "UNKNOWN").Error
		}
		return db.Model(p).Update("status", "FAILED").Error
	}
	return nil
}

// Unknown records UNKNOWN: silent.
func Unknown(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		return db.Model(p).Updates(map[string]any{"Status": "UNKNOWN"}).Error
	}
	return nil
}

// Success writes a refund entry only when the charge succeeded and a
// refund was asked for: silent.
func Success(ctx context.Context, db *gorm.DB, p *Payment) error {
	if err := netx.Charge(ctx, p.ID, 10); err != nil {
		return err
	}
	return db.Create(&LedgerEntry{Kind: "refund", Amount: -10}).Error
}
