// Package sksvc declares an idemgen service (its wrapper is generated in
// payments_idem.go).
package sksvc

import "context"

type ChargeRequest struct {
	IdempotencyKey string
	OrderID        string
	Amount         int64
	Meta           Meta
}

type Meta struct{ RequestID string }

type RefundRequest struct {
	Meta   Meta
	Amount int64
}

type Receipt struct{ ID string }

//idem:service
type Payments interface {
	//idem:op key=req.IdempotencyKey
	Charge(ctx context.Context, req ChargeRequest) (Receipt, error)
	//idem:op key=req.Meta.RequestID
	Refund(ctx context.Context, req RefundRequest) (Receipt, error)
	//idem:skip
	Find(ctx context.Context, req ChargeRequest) (Receipt, error)
}
