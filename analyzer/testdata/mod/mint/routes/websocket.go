// Package routes serves the mint's websocket subscriptions.
package routes

import (
	"context"
	"log/slog"

	"example.com/orm/mint/mint"
)

// Notify sends a state to a subscriber.
type Notify func(state string) error

// CheckStatuses begins a transaction per filter; a mint quote's branch
// commits it (through MintDB.Commit) before asking the backend, a melt
// quote's branch asks while it is open.
func CheckStatuses(ctx context.Context, m *mint.Mint, kind string, filters []string, send Notify) error {
	for _, filter := range filters {
		tx, err := m.MintDB.GetTx(ctx)
		if err != nil {
			return err
		}
		defer func() {
			if err != nil {
				if rollbackErr := m.MintDB.Rollback(ctx, tx); rollbackErr != nil {
					slog.Warn("rollback error", slog.Any("error", rollbackErr))
				}
			}
		}()
		switch kind {
		case "bolt11_mint_quote":
			quote, err := m.MintDB.GetQuote(tx, filter)
			if err != nil {
				return err
			}
			if err := m.MintDB.Commit(ctx, tx); err != nil {
				return err
			}
			state, err := m.LightningBackend.CheckPayed(quote.ID, quote.CheckingID) // negative: committed in this branch
			if err != nil {
				return err
			}
			if err := send(state); err != nil {
				return err
			}
		case "bolt11_melt_quote":
			state, err := mint.CheckMeltRequest(ctx, m, filter) // want txrpc
			if err != nil {
				return err
			}
			if err := send(state); err != nil {
				return err
			}
		}
	}
	return nil
}
