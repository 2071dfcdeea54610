// Package idemhttp is a stub of the idem HTTP client transport.
package idemhttp

import (
	"context"
	"net/http"
)

type Transport struct{ Base http.RoundTripper }

func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) { return t.Base.RoundTrip(r) }

func NewClient(t *Transport) *http.Client { return &http.Client{Transport: t} }

func WithKey(ctx context.Context, key string) context.Context { return ctx }

func NewKey() string { return "" }
