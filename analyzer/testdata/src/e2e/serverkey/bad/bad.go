// Package bad sends a new Idempotency-Key on every attempt.
package bad

import (
	"net/http"

	"github.com/google/uuid"
)

func Post(c *http.Client, req *http.Request) (*http.Response, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", uuid.NewString())
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			return resp, nil
		}
	}
	return nil, err
}
