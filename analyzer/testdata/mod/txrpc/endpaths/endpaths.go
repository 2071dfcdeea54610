// Package endpaths: transactions ended through helpers only on some of
// their paths.
package endpaths

import (
	"context"

	"gorm.io/gorm"

	"example.com/orm/netx"
	"example.com/orm/txrpc/endpaths/txutil"
)

type Order struct {
	ID    string
	State string
}

// RealPanicHelper: the order service's helper, whose rollback paths all
// panic: the payment is created while the transaction is open.
func RealPanicHelper(ctx context.Context, db *gorm.DB, lg *txutil.Logger, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.PanicIfErrorWithRollback(err, id, []string{"create order"}, lg, tx)
	err = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	if err != nil {
		txutil.PanicIfErrorWithRollback(err, id, []string{"create payment"}, lg, tx)
	}
	tx.Commit()
}

// LoggerPanic: rolled back only where the logger panics.
func LoggerPanic(ctx context.Context, db *gorm.DB, lg *txutil.Logger, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.RollbackAndPanic(err, tx, lg)
	_ = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	tx.Commit()
}

// LogPanicf: rolled back only where log.Panicf panics.
func LogPanicf(ctx context.Context, db *gorm.DB, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.RollbackAndPanicf(err, tx)
	_ = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	tx.Commit()
}

// NeverReturns: rolled back only before a call that never returns.
func NeverReturns(ctx context.Context, db *gorm.DB, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.RollbackAndFail(err, tx)
	_ = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	tx.Commit()
}

// NeverReturnsElsewhere: rolled back only before a call, in another
// package, that never returns.
func NeverReturnsElsewhere(ctx context.Context, db *gorm.DB, id string) {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.RollbackAndAbort(err, tx)
	_ = netx.Charge(ctx, id, 100) // want `netx.Charge .*while the database transaction`
	tx.Commit()
}

// RollbackIfErrThenReturn: rolled back when err is set, and then the
// caller returns on that error: open at the call.
func RollbackIfErrThenReturn(ctx context.Context, db *gorm.DB, id string) error {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.RollbackIfErr(tx, err)
	if err != nil {
		_ = netx.Notify(ctx, "failed/"+id) // rolled back: silent
		return err
	}
	if err := netx.Charge(ctx, id, 100); err != nil { // want `netx.Charge .*while the database transaction`
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

// RollbackIfErrInBranch: the helper called where err is set ends it.
func RollbackIfErrInBranch(ctx context.Context, db *gorm.DB, id string) error {
	tx := db.Begin()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	if err != nil {
		txutil.RollbackIfErr(tx, err)
		return netx.Notify(ctx, "failed/"+id) // rolled back: silent
	}
	if err := netx.Charge(ctx, id, 100); err != nil { // want `netx.Charge .*while the database transaction`
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

// CommitIfOKThenCall: committed when err is nil; the caller calls on
// that branch (silent) and notifies on the other while it is open.
func CommitIfOKThenCall(ctx context.Context, db *gorm.DB, id string) error {
	tx := db.Begin()
	defer tx.Rollback()
	err := tx.Create(&Order{ID: id, State: "NEW"}).Error
	txutil.CommitIfOK(tx, err)
	if err != nil {
		_ = netx.Notify(ctx, "failed/"+id) // want `netx.Notify .*while the database transaction`
		return err
	}
	return netx.Charge(ctx, id, 100) // committed: silent
}
