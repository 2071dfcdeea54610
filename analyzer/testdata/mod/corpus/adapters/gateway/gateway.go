// Package gateway implements domain.PaymentGateway over HTTP.
package gateway

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
)

type Client struct {
	HTTP *http.Client
	URL  string
}

func (c *Client) Charge(ctx context.Context, id string, amount int64) error {
	req, err := http.NewRequestWithContext(ctx, "POST", c.URL+"/charges", strings.NewReader(id+":"+strconv.FormatInt(amount, 10)))
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", id)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (c *Client) GetPaymentStatus(ctx context.Context, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+"/charges/"+id, nil)
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
