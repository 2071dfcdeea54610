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

	"github.com/idemkit/idem/examples/adopt/after/db"
	"github.com/idemkit/idem/runtime"
)

// ErrNotPayable: the order is not the customer's, or not pending.
var ErrNotPayable = errors.New("order not payable")

// Service pays orders.
type Service struct {
	q   db.Querier
	pay Payments
}

// NewService returns a Service on the queries and the payments
// (NewIdempotentPayments).
func NewService(q db.Querier, pay Payments) *Service { return &Service{q: q, pay: pay} }

// Receipt is the answer to a payment.
type Receipt struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
}

// Pay charges the customer's pending order and marks it paid. The charge
// runs at most once per order: a retry after a lost reply, or after
// MarkOrderPaid failed, replays it.
func (s *Service) Pay(ctx context.Context, customerID, orderID string) (Receipt, error) {
	o, err := s.q.GetOrder(ctx, orderID)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && (o.CustomerID != customerID || o.Status != "pending") {
		return Receipt{}, ErrNotPayable
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("reading order %s: %w", orderID, err)
	}
	ch, err := s.pay.ChargeOrder(ctx, ChargeOrderRequest{OrderID: o.ID, CustomerID: customerID, AmountCents: o.AmountCents, Currency: o.Currency})
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
// authentication in front of it put in X-Customer-ID. Wrap mux with
// idemhttp.Middleware: a retry of the request with the same
// Idempotency-Key gets the recorded answer.
func (s *Service) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		rc, err := s.Pay(r.Context(), r.Header.Get("X-Customer-ID"), r.PathValue("id"))
		switch {
		case errors.Is(err, ErrNotPayable):
			http.Error(w, err.Error(), http.StatusConflict)
		case errors.Is(err, runtime.ErrPermanent):
			http.Error(w, "payment refused", http.StatusPaymentRequired)
		case errors.Is(err, runtime.ErrInProgress), errors.Is(err, runtime.ErrOutcomeUnknown):
			// 5xx releases the request's key: the client's retry asks again.
			w.Header().Set("Retry-After", "5")
			http.Error(w, "payment pending; retry later", http.StatusServiceUnavailable)
		case err != nil:
			http.Error(w, "payment failed", http.StatusBadGateway)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(rc)
		}
	})
}
