// Package gateway is the shop's client of its payment service provider
// (PSP), which deduplicates charges by their Idempotency-Key.
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
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

// Client calls the PSP.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// Charge charges an order, retrying when the PSP is unavailable.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Charge{}, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/charges", bytes.NewReader(body))
		if err != nil {
			return Charge{}, err
		}
		httpReq.Header.Set("Content-Type", "application/json")
		httpReq.Header.Set("Idempotency-Key", rand.Text())
		resp, err := c.HTTP.Do(httpReq)
		if err != nil {
			lastErr = err
			continue
		}
		var ch Charge
		err = json.NewDecoder(resp.Body).Decode(&ch)
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 500:
			lastErr = fmt.Errorf("psp: %s", resp.Status)
			continue
		case resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK:
			return Charge{}, fmt.Errorf("psp refused the charge: %s", resp.Status)
		case err != nil:
			return Charge{}, fmt.Errorf("psp: decoding the charge: %w", err)
		}
		return ch, nil
	}
	return Charge{}, fmt.Errorf("psp: %w", lastErr)
}
