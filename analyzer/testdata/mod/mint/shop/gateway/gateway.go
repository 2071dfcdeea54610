// Package gateway declares the payment gateway and implements it over HTTP.
package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// Payment is a payment created at the gateway.
type Payment struct {
	ID      string
	OrderID string
	URL     string
}

// Gateway creates payments.
type Gateway interface {
	CreatePayment(ctx context.Context, orderID string, amount int64) (Payment, error)
}

// HTTP is the gateway's REST API.
type HTTP struct {
	BaseURL string
	Client  *http.Client
}

func (h *HTTP) CreatePayment(ctx context.Context, orderID string, amount int64) (Payment, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.BaseURL+"/payments", strings.NewReader(`{"order":"`+orderID+`"}`))
	if err != nil {
		return Payment{}, err
	}
	resp, err := h.Client.Do(req)
	if err != nil {
		return Payment{}, err
	}
	defer resp.Body.Close()
	var p Payment
	return p, json.NewDecoder(resp.Body).Decode(&p)
}
