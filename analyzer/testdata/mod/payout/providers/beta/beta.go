// Package beta pays out through the beta provider's form API.
package beta

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"example.com/orm/payout/domain"
)

// Client is the beta provider.
type Client struct {
	Endpoint string
	Token    string
}

// Name names the provider.
func (c Client) Name() string { return "beta" }

// Disburse posts the payout as a form and reads the provider's id.
func (c Client) Disburse(ctx context.Context, d *domain.Disbursement) (string, error) {
	form := url.Values{"ref": {d.Reference}, "amount": {strconv.FormatInt(d.Amount, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	id, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	if err != nil {
		return "", err
	}
	if resp.StatusCode/100 != 2 {
		return "", errors.New("beta: " + resp.Status)
	}
	return string(id), nil
}
