// Package buntx: bun transactions (RunInTx on DB and IDB, BeginTx).
package buntx

import (
	"context"

	"github.com/uptrace/bun"

	"example.com/orm/netx"
)

type Invoice struct {
	ID    int64
	State string
}

func RunInTx(ctx context.Context, db *bun.DB, inv *Invoice) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		inv.State = "open"
		if _, err := tx.NewUpdate().Model(inv).WherePK().Exec(ctx); err != nil {
			return err
		}
		return netx.Notify(ctx, "inv") // want `netx.Notify .*while the database transaction`
	})
}

func ThroughIDB(ctx context.Context, db bun.IDB, inv *Invoice) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return netx.Notify(ctx, "inv") // want `netx.Notify .*while the database transaction`
	})
}

func BeginTx(ctx context.Context, db *bun.DB, inv *Invoice) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.NewInsert().Model(inv).Exec(ctx); err != nil {
		return err
	}
	if err := netx.Notify(ctx, "inv"); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit()
}

// CommitThenCall: silent.
func CommitThenCall(ctx context.Context, db *bun.DB, inv *Invoice) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.NewInsert().Model(inv).Exec(ctx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return netx.Notify(ctx, "inv")
}
