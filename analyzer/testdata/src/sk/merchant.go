package sk

import (
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"time"

	"github.com/payprovider/sdk"
)

type Order struct {
	No     string
	Amount int64
}

// 20. a merchant order number minted from time.Now() and random digits on
// every call, sent to the provider as its dedup reference.
func prepay(ctx context.Context, c *sdk.Client, o Order) error {
	no := time.Now().Format("20060102150405") + fmt.Sprintf("%06d", rand.Int63()%1000000)
	_, err := c.Prepay(ctx, sdk.PrepayRequest{OutTradeNo: sdk.String(no), Amount: o.Amount}) // want `sdk\.PrepayRequest\.OutTradeNo, the merchant reference the provider deduplicates on, is minted on the server \(time\.Now\(\)\)`
	return err
}

// 20'. the order's own number.
func prepayOrder(ctx context.Context, c *sdk.Client, o Order) error {
	_, err := c.Prepay(ctx, sdk.PrepayRequest{OutTradeNo: sdk.String(o.No), Amount: o.Amount})
	return err
}

// 21. a checkout session's client_reference_id and merchant reference.
func session(ctx context.Context, c *sdk.Client) error {
	p := &sdk.SessionParams{}
	p.MerchantReference = fmt.Sprint(time.Now().UnixNano()) // want `sdk\.SessionParams\.MerchantReference, the merchant reference the provider deduplicates on, is minted on the server \(time\.Now\(\)\)`
	return c.NewSession(ctx, p)
}

// 22. a form field the provider deduplicates on.
func form(o Order) url.Values {
	v := url.Values{}
	v.Set("client_reference_id", fmt.Sprintf("%s-%d", o.No, time.Now().UnixNano())) // want `the client_reference_id sent to the downstream, the merchant reference the provider deduplicates on, is minted on the server \(time\.Now\(\)\)`
	v.Set("description", fmt.Sprint(time.Now().UnixNano()))
	return v
}
