// Package c is the leaf of a cross-package chain: a -> b -> c -> net/http.
package c

import (
	"bytes"
	"net/http"
)

// PostJSON posts body to url.
func PostJSON(url string, body []byte) error {
	resp, err := http.DefaultClient.Do(mustReq(url, body))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func mustReq(url string, body []byte) *http.Request {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	return req
}

// Checksum does no I/O.
func Checksum(b []byte) int {
	n := 0
	for _, x := range b {
		n += int(x)
	}
	return n
}
