package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
)

//go:generate go run github.com/idemkit/idem/cmd/idemgen

// Payments is the payment service of a shop. idemgen turns it into
// NewIdempotentPayments (payments_idem.go): a wrapper that runs Charge and
// CreateOrder at most once per idempotency key.
//
//idem:service
type Payments interface {
	// Charge charges a card at the gateway: a remote effect. A timeout
	// leaves its outcome unknown; FindCharge asks the gateway. Records are
	// per merchant (scope) and named shop.Charge (op).
	//
	//idem:op key=req.IdempotencyKey effect=remote scope=req.MerchantID op=shop.Charge lease=30s ttl=24h reconcile=FindCharge
	Charge(ctx context.Context, req ChargeRequest) (ChargeReceipt, error)

	// CreateOrder writes the order in the caller's transaction: a local
	// effect, committed together with its idempotency record.
	//
	//idem:op key=req.OrderID effect=local scope=req.MerchantID op=shop.CreateOrder ttl=72h
	CreateOrder(ctx context.Context, tx pgx.Tx, req OrderRequest) (Order, error)

	// FindCharge tells whether the charge of req happened.
	//
	//idem:skip
	FindCharge(ctx context.Context, req ChargeRequest) (ChargeReceipt, runtime.Outcome, error)
}

// ChargeRequest is what a client sends to charge a card.
type ChargeRequest struct {
	IdempotencyKey string `json:"idempotency_key"`
	MerchantID     string `json:"merchant_id"`
	Card           string `json:"card"`
	Cents          int64  `json:"cents"`
	Currency       string `json:"currency"`
}

// ChargeReceipt is the gateway's answer.
type ChargeReceipt struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
	Currency string `json:"currency"`
}

// OrderRequest creates an order; OrderID is the client's idempotency key.
type OrderRequest struct {
	OrderID    string `json:"order_id"`
	MerchantID string `json:"merchant_id"`
	Item       string `json:"item"`
	Cents      int64  `json:"cents"`
}

// Order is a created order.
type Order struct {
	OrderID string `json:"order_id"`
	Number  int64  `json:"number"`
}

// service implements Payments with no idempotency of its own: the
// generated wrapper adds it.
type service struct {
	gateway *Gateway
}

var _ Payments = (*service)(nil)

func (s *service) Charge(ctx context.Context, req ChargeRequest) (ChargeReceipt, error) {
	// The downstream key is the same on every attempt of this identity:
	// the gateway deduplicates with it, and FindCharge looks it up.
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return ChargeReceipt{}, runtime.Permanent(errors.New("charge called outside the idempotent wrapper"))
	}
	return s.gateway.Charge(ctx, dk, req)
}

func (s *service) FindCharge(ctx context.Context, req ChargeRequest) (ChargeReceipt, runtime.Outcome, error) {
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return ChargeReceipt{}, runtime.OutcomeUnknown, errors.New("find called outside a reconciliation")
	}
	if rc, found := s.gateway.Lookup(dk); found {
		return rc, runtime.OutcomeSucceeded, nil
	}
	return ChargeReceipt{}, runtime.OutcomeNotHappened, nil
}

func (s *service) CreateOrder(ctx context.Context, tx pgx.Tx, req OrderRequest) (Order, error) {
	var n int64
	err := tx.QueryRow(ctx,
		`INSERT INTO example_orders (order_id, merchant_id, item, cents) VALUES ($1, $2, $3, $4) RETURNING number`,
		req.OrderID, req.MerchantID, req.Item, req.Cents).Scan(&n)
	if err != nil {
		return Order{}, fmt.Errorf("inserting order %s: %w", req.OrderID, err)
	}
	return Order{OrderID: req.OrderID, Number: n}, nil
}

// ordersTable is the example's own table, next to idem_records.
const ordersTable = `CREATE TABLE IF NOT EXISTS example_orders (
    number      bigserial PRIMARY KEY,
    order_id    text   NOT NULL,
    merchant_id text   NOT NULL,
    item        text   NOT NULL,
    cents       bigint NOT NULL
)`
