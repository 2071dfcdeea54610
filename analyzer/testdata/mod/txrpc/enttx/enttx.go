// Package enttx: ent transactions (Client.Tx, and the WithTx helper from
// ent's documentation, an inferred runner).
package enttx

import (
	"context"
	"fmt"

	"example.com/orm/netx"
	"example.com/orm/txrpc/enttx/ent"
)

func ClientTx(ctx context.Context, client *ent.Client, id int) error {
	tx, err := client.Tx(ctx)
	if err != nil {
		return err
	}
	if err := tx.Payment.UpdateOneID(id).SetStatus("PROCESSING").Exec(ctx); err != nil {
		return tx.Rollback()
	}
	if err := netx.Notify(ctx, "pay"); err != nil { // want `netx.Notify .*while the database transaction`
		return tx.Rollback()
	}
	return tx.Commit()
}

// WithTx is the helper of ent's documentation.
func WithTx(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) error {
	tx, err := client.Tx(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if v := recover(); v != nil {
			tx.Rollback()
			panic(v)
		}
	}()
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			err = fmt.Errorf("%w: rolling back transaction: %v", err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing transaction: %w", err)
	}
	return nil
}

func ThroughWithTx(ctx context.Context, client *ent.Client, id int) error {
	return WithTx(ctx, client, func(tx *ent.Tx) error {
		if err := tx.Payment.UpdateOneID(id).SetStatus("PROCESSING").Exec(ctx); err != nil {
			return err
		}
		return netx.Notify(ctx, "pay") // want `netx.Notify .*while the database transaction`
	})
}

// CommitFirst: silent.
func CommitFirst(ctx context.Context, client *ent.Client, id int) error {
	tx, err := client.Tx(ctx)
	if err != nil {
		return err
	}
	if err := tx.Payment.UpdateOneID(id).SetStatus("PROCESSING").Exec(ctx); err != nil {
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return netx.Notify(ctx, "pay")
}
