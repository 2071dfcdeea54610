// Package bpimpl implements bpsvc.Payments; calls inside it are its own.
package bpimpl

import (
	"context"

	"bpsvc"
)

// Service is the inner implementation of bpsvc.Payments.
type Service struct{}

func (s *Service) Charge(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}

func (s *Service) Refund(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return s.Charge(ctx, req) // its own package: not a bypass
}

func (s *Service) Find(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}

func (s *Service) Helper() {}

// Value implements bpsvc.Payments with value receivers.
type Value struct{}

func (Value) Charge(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}
func (Value) Refund(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}
func (Value) Find(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}

// Book implements bpsvc.Ledger, whose wrapper was never generated.
type Book struct{}

func (*Book) Post(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}

// Gateway has a Charge method but does not implement bpsvc.Payments.
type Gateway struct{}

func (*Gateway) Charge(ctx context.Context, req bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.Receipt{}, nil
}
