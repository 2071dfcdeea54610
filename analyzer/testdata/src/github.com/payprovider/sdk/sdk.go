// Package sdk is the shape of a payment provider's Go SDK (WeChat Pay's
// prepay, Alipay's trade create, Stripe's checkout session): the merchant's
// order number is the provider's dedup reference.
package sdk

import "context"

type Client struct{}

// PrepayRequest creates a prepay order.
type PrepayRequest struct {
	OutTradeNo  *string
	Description string
	Amount      int64
}

type PrepayResponse struct{ PrepayID string }

func (c *Client) Prepay(ctx context.Context, req PrepayRequest) (*PrepayResponse, error) {
	return nil, nil
}

// SessionParams creates a checkout session.
type SessionParams struct {
	ClientReferenceID *string
	MerchantReference string
}

func (c *Client) NewSession(ctx context.Context, p *SessionParams) error { return nil }

func String(s string) *string { return &s }
