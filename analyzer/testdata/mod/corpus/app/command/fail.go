package command

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"example.com/orm/corpus/domain"
)

func postJSON(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (s *Service) ChargeFailsMap(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		s.Gorm.Model(p).Updates(map[string]any{"Status": "FAILED"}) // want timeoutfail
		return err
	}
	return nil
}

func (s *Service) PayFailsBunModel(ctx context.Context, inv *domain.Invoice) error {
	if _, err := s.LN.PayInvoice(ctx, inv.Hash); err != nil {
		inv.State = "error"
		if _, uerr := s.Bun.NewUpdate().Model(inv).WherePK().Exec(ctx); uerr != nil { // want timeoutfail
			return uerr
		}
		return err
	}
	return nil
}

func (s *Service) ChargeFailsReversal(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return s.Gorm.Create(&domain.LedgerEntry{PaymentID: p.ID, Kind: "reversal", Amount: -p.Amount}).Error // want timeoutfail
	}
	return nil
}

func (s *Service) ChargeFailsRefundRow(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		s.Sqlx.MustExecContext(ctx, "INSERT INTO refunds (payment_id, amount) VALUES ($1, $2)", p.ID, p.Amount) // want timeoutfail
		return err
	}
	return nil
}

func (s *Service) ChargeFailsMarkFailed(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		_ = s.Store.MarkPaymentFailed(ctx, p.ID) // want timeoutfail
		return err
	}
	return nil
}

func (s *Service) ChargeFailsHandle(ctx context.Context, p *domain.Payment) error {
	err := s.Gateway.Charge(ctx, p.ID, p.Amount)
	if err != nil {
		return s.Payments.HandleFailedPayment(ctx, p.ID) // want timeoutfail
	}
	return nil
}

func (s *Service) ChargeFailsRelease(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return s.Payments.ReleaseReservation(ctx, p.ID) // want timeoutfail
	}
	return nil
}

func (s *Service) ChargeFailsDeleteKey(ctx context.Context, idempotencyKey string, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		_ = s.Keys.Del(ctx, idempotencyKey) // want timeoutfail
		return err
	}
	return nil
}

func (s *Service) ChargeFailsEnt(ctx context.Context, id int, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return s.Ent.Payment.UpdateOneID(id).SetStatus("FAILED").Exec(ctx) // want timeoutfail
	}
	return nil
}

func (s *Service) ChargeFailsRollback(ctx context.Context, p *domain.Payment) error {
	tx, err := s.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE payments SET status = 'PROCESSING' WHERE id = $1", p.ID); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil { // want txrpc
		_ = tx.Rollback() // want timeoutfail
		return err
	}
	return tx.Commit()
}

func (s *Service) ExchangeFailsPopCancel(ctx context.Context, o *domain.Order, code string) error {
	if _, err := s.OAuth.Exchange(ctx, code); err != nil {
		o.State = "cancelled"
		return s.Pop.Update(o) // want timeoutfail
	}
	return nil
}

func (s *Service) NotifyFailsSetStatus(ctx context.Context, p *domain.Payment) error {
	if err := postWebhook(ctx, p.ID); err != nil {
		return s.Gorm.Model(p).Update("status", "failed").Error // want timeoutfail
	}
	return nil
}

// AskFirst asks the gateway what happened before failing.
// negative: the correct pattern.
func (s *Service) AskFirst(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		st, qerr := s.Gateway.GetPaymentStatus(ctx, p.ID)
		if qerr == nil && st == "not_found" {
			s.Gorm.Model(p).Updates(map[string]any{"Status": "FAILED"})
		}
		return err
	}
	return nil
}

// LookupFirst asks LND whether the payment happened before failing it.
// negative: the correct pattern.
func (s *Service) LookupFirst(ctx context.Context, inv *domain.Invoice) error {
	if _, err := s.LN.PayInvoice(ctx, inv.Hash); err != nil {
		if st, lerr := s.LN.LookupInvoice(ctx, inv.Hash); lerr == nil && st == "FAILED" {
			inv.State = "error"
			_, _ = s.Bun.NewUpdate().Model(inv).WherePK().Exec(ctx)
		}
		return err
	}
	return nil
}

// TimeoutFirst tells a timeout apart.
// negative: a timeout is recorded as UNKNOWN.
func (s *Service) TimeoutFirst(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return s.Gorm.Model(p).Update("status", "UNKNOWN").Error
		}
		return s.Gorm.Model(p).Update("status", "FAILED").Error
	}
	return nil
}

// RecordsUnknown never fails the payment.
// negative: UNKNOWN is not a failure.
func (s *Service) RecordsUnknown(ctx context.Context, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return s.Gorm.Model(p).Updates(map[string]any{"Status": "UNKNOWN"}).Error
	}
	return nil
}

// DiscoveryFails fails the login when the OIDC discovery document cannot
// be read.
// negative: a GET has no remote effect to lose.
func (s *Service) DiscoveryFails(ctx context.Context, p *domain.Payment) error {
	if _, err := s.OAuth.Discover(ctx); err != nil {
		return s.Gorm.Model(p).Update("status", "failed").Error
	}
	return nil
}
