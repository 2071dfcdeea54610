package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// FindCharge looks up the charge made with an idempotency key: found is
// false when the PSP has none.
func (c *Client) FindCharge(ctx context.Context, key string) (ch Charge, found bool, err error) {
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/charges?idempotency_key="+url.QueryEscape(key), nil)
	if err != nil {
		return Charge{}, false, err
	}
	resp, err := c.HTTP.Do(httpReq)
	if err != nil {
		return Charge{}, false, fmt.Errorf("psp: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		err := json.NewDecoder(resp.Body).Decode(&ch)
		return ch, err == nil, err
	case http.StatusNotFound:
		return Charge{}, false, nil
	}
	return Charge{}, false, fmt.Errorf("psp: %s", resp.Status)
}
