// Package service pays disbursements out through a list of providers.
package service

import (
	"context"
	"errors"
	"fmt"

	"example.com/orm/payout/domain"
)

// Service pays out.
type Service struct {
	Store     domain.Store
	Providers []domain.Provider
}

var errNoProvider = errors.New("no provider paid")

// Disburse tries each provider in turn; a provider's error marks the
// disbursement FAILED and the next provider is tried. A timeout may have
// paid: the next provider pays again.
func (s *Service) Disburse(ctx context.Context, d *domain.Disbursement) error {
	for _, p := range s.Providers {
		ref, err := p.Disburse(ctx, d)
		if err != nil {
			d.Status = domain.StatusFailed
			d.FailureReason = fmt.Sprintf("%s: %v", p.Name(), err)
			if uerr := s.Store.UpdateDisbursement(ctx, d); uerr != nil { // want timeoutfail
				return uerr
			}
			continue
		}
		d.Status, d.ProviderRef = domain.StatusCompleted, ref
		return s.Store.UpdateDisbursement(ctx, d)
	}
	return errNoProvider
}

// Cancel gives up after one provider's error, through the status setter.
func (s *Service) Cancel(ctx context.Context, d *domain.Disbursement) error {
	if _, err := s.Providers[0].Disburse(ctx, d); err != nil {
		return s.Store.SetStatus(ctx, d.Reference, domain.StatusFailed) // want timeoutfail
	}
	return s.Store.SetStatus(ctx, d.Reference, domain.StatusCompleted)
}

// negative: DisburseChecked tells a timeout apart first: the outcome is
// UNKNOWN and no other provider is tried.
func (s *Service) DisburseChecked(ctx context.Context, d *domain.Disbursement) error {
	for _, p := range s.Providers {
		ref, err := p.Disburse(ctx, d)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				d.Status = domain.StatusUnknown
				return s.Store.UpdateDisbursement(ctx, d)
			}
			d.Status = domain.StatusFailed
			if uerr := s.Store.UpdateDisbursement(ctx, d); uerr != nil {
				return uerr
			}
			continue
		}
		d.Status, d.ProviderRef = domain.StatusCompleted, ref
		return s.Store.UpdateDisbursement(ctx, d)
	}
	return errNoProvider
}

// negative: Retry sets FAILED on the struct but records only the attempt:
// Touch writes no status.
func (s *Service) Retry(ctx context.Context, d *domain.Disbursement) error {
	if _, err := s.Providers[0].Disburse(ctx, d); err != nil {
		d.Status = domain.StatusFailed
		return s.Store.Touch(ctx, d)
	}
	return nil
}

// negative: Park marks the disbursement FAILED only when asked to, so the
// status the store writes is not determined.
func (s *Service) Park(ctx context.Context, d *domain.Disbursement, giveUp bool) error {
	if _, err := s.Providers[0].Disburse(ctx, d); err != nil {
		if giveUp {
			d.Status = domain.StatusFailed
		}
		return s.Store.UpdateDisbursement(ctx, d)
	}
	return nil
}

// DisburseLast gives up after the last provider's error, recording FAILED
// in a struct literal given by value.
func (s *Service) DisburseLast(ctx context.Context, d *domain.Disbursement) error {
	for i, p := range s.Providers {
		ref, err := p.Disburse(ctx, d)
		if err != nil {
			if i < len(s.Providers)-1 {
				continue
			}
			return s.Store.Record(ctx, domain.Update{Reference: d.Reference, Status: domain.StatusFailed, FailureCode: "INTERNAL ERROR"}) // want timeoutfail
		}
		return s.Store.Record(ctx, domain.Update{Reference: d.Reference, ProviderID: i, ProviderRef: ref, Status: domain.StatusCompleted})
	}
	return errNoProvider
}

// negative: RecordAnswer writes the status the provider answered with, not
// a constant: not determined to be a failure.
func (s *Service) RecordAnswer(ctx context.Context, d *domain.Disbursement, answer string) error {
	if _, err := s.Providers[0].Disburse(ctx, d); err != nil {
		return s.Store.Record(ctx, domain.Update{Reference: d.Reference, Status: answer})
	}
	return nil
}
