// Package netx holds the network calls the test packages make.
package netx

import (
	"context"
	"net/http"
	"strings"
)

// Notify posts a webhook.
func Notify(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://hooks.example/"+id, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Charge asks the payment provider to charge.
func Charge(ctx context.Context, id string, amount int64) error {
	return Notify(ctx, "charge/"+id)
}
