// Package lnd implements domain.LNClient over LND's REST API.
package lnd

import (
	"context"
	"io"
	"net/http"
	"strings"
)

type Client struct {
	HTTP *http.Client
	URL  string
}

func (c *Client) PayInvoice(ctx context.Context, bolt11 string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", c.URL+"/v2/router/send", strings.NewReader(bolt11))
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (c *Client) LookupInvoice(ctx context.Context, hash string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+"/v2/invoices/lookup?payment_hash="+hash, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
