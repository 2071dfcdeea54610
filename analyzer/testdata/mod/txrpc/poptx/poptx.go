// Package poptx: gobuffalo/pop transactions (Connection.Transaction,
// NewTransaction), and a persister interface's Transaction runner.
package poptx

import (
	"context"

	"github.com/gobuffalo/pop/v6"

	"example.com/orm/netx"
)

func Transaction(ctx context.Context, c *pop.Connection, id string) error {
	return c.Transaction(func(tx *pop.Connection) error {
		if err := tx.RawQuery("UPDATE users SET confirmed = true WHERE id = ?", id).Exec(); err != nil {
			return err
		}
		return netx.Notify(ctx, id) // want `netx.Notify .*while the database transaction`
	})
}

func NewTransaction(ctx context.Context, c *pop.Connection, id string) error {
	tx, err := c.NewTransactionContext(ctx)
	if err != nil {
		return err
	}
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		_ = tx.TX.Rollback()
		return err
	}
	return tx.TX.Commit()
}

// Persister is how services hand out transactions.
type Persister interface {
	Transaction(ctx context.Context, fn func(ctx context.Context, tx *pop.Connection) error) error
}

// ThroughInterface: the callback takes a *pop.Connection and returns an
// error, so it runs in a transaction whatever implements Persister.
func ThroughInterface(ctx context.Context, p Persister, id string) error {
	return p.Transaction(ctx, func(ctx context.Context, tx *pop.Connection) error {
		return netx.Notify(ctx, id) // want `netx.Notify .*while the database transaction`
	})
}

// Outside: no transaction: silent.
func Outside(ctx context.Context, c *pop.Connection, id string) error {
	if err := c.RawQuery("UPDATE users SET confirmed = true WHERE id = ?", id).Exec(); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}
