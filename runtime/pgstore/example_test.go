package pgstore_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type OrderRequest struct {
	OrderID string
	Cents   int64
}

type Order struct {
	ID int64
}

// A local effect: the order row and the idempotency record commit together.
func ExampleDoTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	rt, err := runtime.New(pgstore.New(pool))
	if err != nil {
		log.Fatal(err)
	}
	req := OrderRequest{OrderID: "ord_123", Cents: 4200}
	var order Order
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		order, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[OrderRequest, Order]{
			Operation: "Orders.Create", Key: req.OrderID, Request: req,
			Effect: func(ctx context.Context, tx pgx.Tx, r OrderRequest) (Order, error) {
				var o Order
				err := tx.QueryRow(ctx, "INSERT INTO orders (ref, cents) VALUES ($1, $2) RETURNING id", r.OrderID, r.Cents).Scan(&o.ID)
				return o, err
			},
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("order %d", order.ID)
}
