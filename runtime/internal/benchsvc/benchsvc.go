// Package benchsvc is a service wrapped by idemgen, for the runtime's
// benchmarks of a generated wrapper (BenchmarkMemWrapper*): the wrapper in
// payments_idem.go is what idemgen emits, regenerated with go generate.
package benchsvc

import (
	"context"

	"github.com/idemkit/idem/runtime"
)

//go:generate go run ../../../cmd/idemgen

// Payments charges accounts.
//
//idem:service
type Payments interface {
	// Charge charges an account, once per key and merchant.
	//
	//idem:op key=req.Key effect=remote scope=req.Merchant op=Payments.Charge reconcile=Find
	Charge(ctx context.Context, req ChargeRequest) (Receipt, error)
	// Find tells whether the charge of req happened.
	//
	//idem:skip
	Find(ctx context.Context, req ChargeRequest) (Receipt, runtime.Outcome, error)
}

// ChargeRequest asks for a charge.
type ChargeRequest struct {
	Key      string `json:"key"`
	Merchant string `json:"merchant"`
	Account  string `json:"account"`
	Cents    int64  `json:"cents"`
}

// Receipt is a charge made.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

// Direct implements Payments with no idempotency: the benchmarks' effect
// and their baseline.
type Direct struct{}

// Charge implements [Payments].
func (Direct) Charge(_ context.Context, req ChargeRequest) (Receipt, error) {
	return Receipt{ChargeID: "ch_1", Cents: req.Cents}, nil
}

// Find implements [Payments]: every charge happened.
func (Direct) Find(_ context.Context, req ChargeRequest) (Receipt, runtime.Outcome, error) {
	return Receipt{ChargeID: "ch_1", Cents: req.Cents}, runtime.OutcomeSucceeded, nil
}
