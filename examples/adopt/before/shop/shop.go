// Package shop is the shop's payment endpoint: POST /orders/{id}/pay
// charges a pending order at the PSP and marks it paid.
package shop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/examples/adopt/before/db"
	"github.com/idemkit/idem/examples/adopt/before/gateway"
)

// ErrNotPayable: the order is not the customer's, or not pending.
var ErrNotPayable = errors.New("order not payable")

// Service pays orders.
type Service struct {
	q  db.Querier
	gw *gateway.Client
}

// NewService returns a Service on the queries and the PSP client.
func NewService(q db.Querier, gw *gateway.Client) *Service { return &Service{q: q, gw: gw} }

// Receipt is the answer to a payment.
type Receipt struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
}

// Pay charges the customer's pending order and marks it paid.
func (s *Service) Pay(ctx context.Context, customerID, orderID string) (Receipt, error) {
	o, err := s.q.GetOrder(ctx, orderID)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && (o.CustomerID != customerID || o.Status != "pending") {
		return Receipt{}, ErrNotPayable
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("reading order %s: %w", orderID, err)
	}
	ch, err := s.gw.Charge(ctx, gateway.ChargeRequest{OrderID: o.ID, AmountCents: o.AmountCents, Currency: o.Currency})
	if err != nil {
		return Receipt{}, fmt.Errorf("charging order %s: %w", orderID, err)
	}
	n, err := s.q.MarkOrderPaid(ctx, db.MarkOrderPaidParams{ID: o.ID, ChargeID: &ch.ID})
	if err != nil {
		return Receipt{}, fmt.Errorf("marking order %s paid: %w", orderID, err)
	}
	if n == 0 {
		return Receipt{}, ErrNotPayable
	}
	return Receipt{OrderID: o.ID, ChargeID: ch.ID}, nil
}

// Routes registers the endpoint on mux. The customer is the one the
// authentication in front of it put in X-Customer-ID.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		rc, err := s.Pay(r.Context(), r.Header.Get("X-Customer-ID"), r.PathValue("id"))
		switch {
		case errors.Is(err, ErrNotPayable):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, "payment failed", http.StatusBadGateway)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(rc)
		}
	})
}
