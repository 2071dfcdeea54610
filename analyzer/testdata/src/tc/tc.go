// Package tc is the leaf of a chain: t -> tc.Charge -> tc.post -> (*http.Client).Do.
package tc

import (
	"context"
	"net/http"
)

// Charge asks the gateway to charge.
func Charge(ctx context.Context, id string) error {
	return post(ctx, "https://pay.example/charge?id="+id)
}

func post(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
