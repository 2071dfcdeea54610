// Package beginhelpers: transactions begun by a repository's helper
// (repo.GetTx(ctx)) with each supported library, then a network call, then
// Commit.
package beginhelpers

import (
	"context"

	"github.com/gobuffalo/pop/v6"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"

	"example.com/orm/netx"
	"example.com/orm/txrpc/enttx/ent"
)

type Repo struct {
	X   *sqlx.DB
	Bun *bun.DB
	Pop *pop.Connection
	Ent *ent.Client
}

func (r *Repo) SqlxTx(ctx context.Context) (*sqlx.Tx, error) { return r.X.BeginTxx(ctx, nil) }

func (r *Repo) BunTx(ctx context.Context) (bun.Tx, error) {
	tx, err := r.Bun.BeginTx(ctx, nil)
	if err != nil {
		return bun.Tx{}, err
	}
	return tx, nil
}

func (r *Repo) PopTx(ctx context.Context) (*pop.Connection, error) {
	return r.Pop.NewTransactionContext(ctx)
}

func (r *Repo) EntTx(ctx context.Context) (*ent.Tx, error) { return r.Ent.Tx(ctx) }

// getTx: a helper of a helper.
func (r *Repo) getTx(ctx context.Context) (*sqlx.Tx, error) { return r.SqlxTx(ctx) }

func Sqlx(ctx context.Context, r *Repo, id string) error {
	tx, err := r.getTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit()
}

func Bun(ctx context.Context, r *Repo, id string) error {
	tx, err := r.BunTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return err
	}
	return tx.Commit()
}

func Pop(ctx context.Context, r *Repo, id string) error {
	tx, err := r.PopTx(ctx)
	if err != nil {
		return err
	}
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return tx.TX.Rollback()
	}
	return tx.TX.Commit()
}

func Ent(ctx context.Context, r *Repo, id string) error {
	tx, err := r.EntTx(ctx)
	if err != nil {
		return err
	}
	if err := netx.Notify(ctx, id); err != nil { // want `netx.Notify .*while the database transaction`
		return tx.Rollback()
	}
	return tx.Commit()
}

// Conn returns the repository's connection: no fresh transaction.
func (r *Repo) Conn() *sqlx.DB { return r.X }

// SqlxCommitted: the helper's transaction is committed before the call.
func SqlxCommitted(ctx context.Context, r *Repo, id string) error {
	tx, err := r.SqlxTx(ctx)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}
