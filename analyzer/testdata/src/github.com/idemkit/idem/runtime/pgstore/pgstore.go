// Package pgstore is a stub of the idem PostgreSQL store's DoTx.
package pgstore

import (
	"context"

	"github.com/idemkit/idem/runtime"
	"github.com/jackc/pgx/v5"
)

type TxCall[Req, Resp any] struct {
	Operation string
	Key       string
	Request   Req
	Effect    func(ctx context.Context, tx pgx.Tx, req Req) (Resp, error)
}

func DoTx[Req, Resp any](ctx context.Context, rt *runtime.Runtime, tx pgx.Tx, c TxCall[Req, Resp]) (Resp, error) {
	return c.Effect(ctx, tx, c.Request)
}
