// Package gateway is the shop's client of its payment service provider
// (PSP), which deduplicates charges by their Idempotency-Key.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// ChargeRequest is a charge of an order.
type ChargeRequest struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// Charge is the PSP's record of a charge.
type Charge struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// RefusedError is the PSP's definitive refusal of a charge (a 4xx).
type RefusedError struct{ Status string }

func (e *RefusedError) Error() string { return "psp refused the charge: " + e.Status }

// Client calls the PSP. Its HTTP client retries: idemhttp.NewClient, which
// sends one Idempotency-Key on every attempt of a charge, the one the
// caller put in the context (idemhttp.WithKey).
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// Charge charges an order once per idempotency key.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Charge{}, err
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(httpReq)
	if err != nil {
		return Charge{}, fmt.Errorf("psp: %w", err) // the charge may or may not have happened
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusTooManyRequests:
		return Charge{}, &RefusedError{Status: resp.Status}
	default:
		return Charge{}, fmt.Errorf("psp: %s", resp.Status) // may or may not have happened
	}
	var ch Charge
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return Charge{}, fmt.Errorf("psp: decoding the charge: %w", err)
	}
	return ch, nil
}
