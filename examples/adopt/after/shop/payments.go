package shop

import (
	"context"
	"errors"

	"github.com/idemkit/idem/examples/adopt/after/gateway"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

//go:generate go run github.com/idemkit/idem/cmd/idemgen

// Payments charges orders at the PSP. idemgen turns it into
// NewIdempotentPayments (payments_idem.go): ChargeOrder runs at most once
// per order, and a charge whose outcome a timeout left unknown is
// converged by FindCharge (inline, or by the reconciler).
//
//idem:service
type Payments interface {
	//idem:op key=req.OrderID scope=req.CustomerID op=shop.ChargeOrder lease=30s ttl=720h reconcile=FindCharge
	ChargeOrder(ctx context.Context, req ChargeOrderRequest) (gateway.Charge, error)

	//idem:skip
	FindCharge(ctx context.Context, req ChargeOrderRequest) (gateway.Charge, runtime.Outcome, error)
}

// ChargeOrderRequest is the charge of one order.
type ChargeOrderRequest struct {
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// NewPayments returns the Payments of the PSP client, without idempotency
// of its own: wrap it with NewIdempotentPayments.
func NewPayments(gw *gateway.Client) Payments { return &payments{gw: gw} }

type payments struct{ gw *gateway.Client }

// ChargeOrder sends the charge with the record's downstream key, the same
// on every attempt and after a restart: the PSP deduplicates with it, and
// FindCharge looks it up.
func (p *payments) ChargeOrder(ctx context.Context, req ChargeOrderRequest) (gateway.Charge, error) {
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return gateway.Charge{}, runtime.Permanent(errors.New("ChargeOrder called outside NewIdempotentPayments"))
	}
	ch, err := p.gw.Charge(idemhttp.WithKey(ctx, dk), gateway.ChargeRequest{OrderID: req.OrderID, AmountCents: req.AmountCents, Currency: req.Currency})
	var refused *gateway.RefusedError
	if errors.As(err, &refused) {
		return gateway.Charge{}, runtime.Permanent(err) // recorded as FAILED and replayed
	}
	return ch, err // any other error: UNKNOWN, converged by FindCharge
}

// FindCharge asks the PSP whether the charge of req happened.
func (p *payments) FindCharge(ctx context.Context, req ChargeOrderRequest) (gateway.Charge, runtime.Outcome, error) {
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return gateway.Charge{}, runtime.OutcomeUnknown, errors.New("FindCharge called outside NewIdempotentPayments")
	}
	ch, found, err := p.gw.FindCharge(ctx, dk)
	switch {
	case err != nil:
		return gateway.Charge{}, runtime.OutcomeUnknown, err
	case !found:
		return gateway.Charge{}, runtime.OutcomeNotHappened, nil
	}
	return ch, runtime.OutcomeSucceeded, nil
}
