// Package alpha pays out through the alpha provider's HTTP API.
package alpha

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"example.com/orm/payout/domain"
)

// Client is the alpha provider.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

// Name names the provider.
func (c *Client) Name() string { return "alpha" }

// Disburse asks the provider to pay d.
func (c *Client) Disburse(ctx context.Context, d *domain.Disbursement) (string, error) {
	body, err := json.Marshal(map[string]any{"reference": d.Reference, "amount": d.Amount})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/payouts", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("alpha: status %d", resp.StatusCode)
	}
	var out struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.ID, nil
}
