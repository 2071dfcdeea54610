// Package httpusers implements domain.UserService over HTTP.
package httpusers

import (
	"context"
	"net/http"
	"strings"
)

type Client struct {
	HTTP *http.Client
	URL  string
}

func (c *Client) NotifyUser(ctx context.Context, userID, text string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", c.URL+"/users/"+userID+"/notify", strings.NewReader(text))
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
