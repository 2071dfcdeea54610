// Package mint is the mint's application layer: it sees the database and
// the Lightning backend through interfaces only.
package mint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"example.com/orm/mint/database"
	"example.com/orm/mint/lightning"
)

type Mint struct {
	MintDB           database.MintDB
	LightningBackend lightning.Backend
}

// rollback is the deferred-rollback idiom: an error saying the
// transaction is already closed (committed) is expected.
func (m *Mint) rollback(ctx context.Context, tx pgx.Tx) {
	if err := m.MintDB.Rollback(ctx, tx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		slog.Warn("rollback error", slog.Any("error", err))
	}
}

// negative: CheckMeltQuoteState reads the quote in a transaction committed
// through MintDB.Commit before asking the backend, then settles it in a
// second transaction.
func (m *Mint) CheckMeltQuoteState(ctx context.Context, quoteID string) (database.Quote, error) {
	initialTx, err := m.MintDB.GetTx(ctx)
	if err != nil {
		return database.Quote{}, err
	}
	defer func() {
		rollbackErr := m.MintDB.Rollback(ctx, initialTx)
		if rollbackErr != nil && !errors.Is(rollbackErr, pgx.ErrTxClosed) {
			slog.Warn("rollback error", slog.Any("error", rollbackErr))
		}
	}()
	quote, err := m.MintDB.GetQuote(initialTx, quoteID)
	if err != nil {
		return quote, err
	}
	if err := m.MintDB.Commit(ctx, initialTx); err != nil {
		return quote, fmt.Errorf("m.MintDB.Commit: %w", err)
	}
	if quote.State != "PENDING" {
		return quote, nil
	}
	status, err := m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID)
	if err != nil {
		return quote, err
	}
	if status == "SETTLED" {
		settleTx, err := m.MintDB.GetTx(ctx)
		if err != nil {
			return quote, err
		}
		defer m.rollback(ctx, settleTx)
		if err := m.MintDB.SetState(settleTx, quote.ID, "PAID"); err != nil {
			return quote, err
		}
		if err := m.MintDB.Commit(ctx, settleTx); err != nil {
			return quote, err
		}
		quote.State = "PAID"
	}
	return quote, nil
}

// negative: AttemptPayment pays with no transaction open; on a doubtful
// outcome it records the checking id in a transaction committed through
// MintDB.Commit, then rechecks the payment.
func (m *Mint) AttemptPayment(ctx context.Context, quote database.Quote, amount int64) (string, error) {
	payment, err := m.LightningBackend.PayInvoice(quote.Request, amount)
	if err != nil || payment.State != "SETTLED" {
		lnTx, err := m.MintDB.GetTx(ctx)
		if err != nil {
			return "", err
		}
		defer m.rollback(ctx, lnTx)
		quote.CheckingID = payment.CheckingID
		if err := m.MintDB.ChangeCheckingID(lnTx, quote.ID, quote.CheckingID); err != nil {
			return "", err
		}
		if err := m.MintDB.Commit(ctx, lnTx); err != nil {
			return "", err
		}
		return m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID)
	}
	return payment.State, nil
}

// negative: RefreshMintQuoteStatus reads the quote, commits through
// MintDB.Commit, then reconciles it with the backend.
func (m *Mint) RefreshMintQuoteStatus(ctx context.Context, quoteID string) (string, error) {
	tx, err := m.MintDB.GetTx(ctx)
	if err != nil {
		return "", err
	}
	defer func() {
		if rollbackErr := m.MintDB.Rollback(ctx, tx); rollbackErr != nil && !errors.Is(rollbackErr, pgx.ErrTxClosed) {
			slog.Warn("rollback error", slog.Any("error", rollbackErr))
		}
	}()
	quote, err := m.MintDB.GetQuote(tx, quoteID)
	if err != nil {
		return "", err
	}
	if err := m.MintDB.Commit(ctx, tx); err != nil {
		return "", err
	}
	if quote.State == "PAID" || quote.State == "ISSUED" {
		return quote.State, nil
	}
	return m.reconcile(quote)
}

func (m *Mint) reconcile(quote database.Quote) (string, error) {
	return m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID)
}

// CheckMeltRequest asks the backend while the transaction that read (and
// locked) the quote is still open: it is rolled back only on error, and
// never committed.
func CheckMeltRequest(ctx context.Context, m *Mint, quoteID string) (string, error) {
	tx, err := m.MintDB.GetTx(ctx)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			if rollbackErr := m.MintDB.Rollback(ctx, tx); rollbackErr != nil {
				slog.Warn("rollback error", slog.Any("error", rollbackErr))
			}
		}
	}()
	quote, err := m.MintDB.GetQuote(tx, quoteID)
	if err != nil {
		return "", err
	}
	if quote.State == "PAID" {
		return quote.State, nil
	}
	status, err := m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID) // want txrpc
	if err != nil {
		return "", err
	}
	return status, nil
}

// SettleAgain reads the quote in a transaction committed through
// MintDB.Commit and asks the backend (no transaction open), then reuses
// the variable for a second GetTx and asks again while that one is open.
func (m *Mint) SettleAgain(ctx context.Context, quoteID string) (string, error) {
	tx, err := m.MintDB.GetTx(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = m.MintDB.Rollback(ctx, tx) }()
	quote, err := m.MintDB.GetQuote(tx, quoteID)
	if err != nil {
		return "", err
	}
	if err := m.MintDB.Commit(ctx, tx); err != nil {
		return "", err
	}
	if _, err := m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID); err != nil { // negative: committed
		return "", err
	}
	tx, err = m.MintDB.GetTx(ctx)
	if err != nil {
		return "", err
	}
	if err := m.MintDB.SetState(tx, quote.ID, "PENDING"); err != nil {
		return "", err
	}
	status, err := m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID) // want txrpc
	if err != nil {
		return "", err
	}
	return status, m.MintDB.Commit(ctx, tx)
}
