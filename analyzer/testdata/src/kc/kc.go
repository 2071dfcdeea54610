// Package kc is the leaf of a chain: k -> kb.Charge -> kc.Post -> (*http.Client).Do.
package kc

import "net/http"

// Post sends the request.
func Post(req *http.Request) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
