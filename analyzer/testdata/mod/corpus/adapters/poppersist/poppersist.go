// Package poppersist implements domain.Persister with pop.
package poppersist

import (
	"context"

	"github.com/gobuffalo/pop/v6"
)

type Persister struct{ Conn *pop.Connection }

func (p *Persister) Transaction(ctx context.Context, fn func(ctx context.Context, tx *pop.Connection) error) error {
	return p.Conn.WithContext(ctx).Transaction(func(tx *pop.Connection) error {
		return fn(ctx, tx)
	})
}
