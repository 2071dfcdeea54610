// Package good mints the Idempotency-Key once and sends it on every attempt.
package good

import (
	"net/http"

	"github.com/google/uuid"
)

func Post(c *http.Client, req *http.Request) (*http.Response, error) {
	key := uuid.NewString()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		req.Header.Set("Idempotency-Key", key)
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			return resp, nil
		}
	}
	return nil, err
}
