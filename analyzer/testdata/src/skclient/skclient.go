// Package skclient: retry loops around the idem client transports.
package skclient

import (
	"context"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/idemhttp"
)

var client = idemhttp.NewClient(nil)

func newReq(ctx context.Context) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://psp.example/charges", strings.NewReader(`{}`))
	return req
}

// 1. The context key minted on each attempt of a loop around the client.
func chargeLoop(ctx context.Context) (*http.Response, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		actx := idemhttp.WithKey(ctx, uuid.NewString()) // want `the key of idemhttp.WithKey is uuid.NewString\(\), minted inside a retry loop`
		var resp *http.Response
		if resp, err = client.Do(newReq(actx)); err == nil {
			return resp, nil
		}
	}
	return nil, err
}

// Its twin: the key fixed before the loop; every attempt sends it.
func chargeLoopOnce(ctx context.Context) (*http.Response, error) {
	ctx = idemhttp.WithKey(ctx, uuid.NewString())
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var resp *http.Response
		if resp, err = client.Do(newReq(ctx)); err == nil {
			return resp, nil
		}
	}
	return nil, err
}

// Its twin: a loop around the client with a key persisted with the intent.
func chargeLoopPersisted(ctx context.Context, intentKey string) error {
	for range 3 {
		if _, err := client.Do(newReq(idemhttp.WithKey(ctx, intentKey))); err == nil {
			return nil
		}
	}
	return nil
}

// Its twin: no loop at all; the transport retries with one key.
func chargeOnce(ctx context.Context) (*http.Response, error) {
	return client.Do(newReq(idemhttp.WithKey(ctx, uuid.NewString())))
}

// 2. The transports' own NewKey, set as the header on each attempt.
func chargeHeader(ctx context.Context) error {
	req := newReq(ctx)
	for range 3 {
		req.Header.Set("Idempotency-Key", idemhttp.NewKey()) // want `the Idempotency-Key header is set from idemhttp.NewKey\(\) at skclient.go:66:37 inside a retry loop`
		if _, err := client.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// Its twin: NewKey once, before the loop.
func chargeHeaderOnce(ctx context.Context) error {
	req := newReq(ctx)
	key := idemhttp.NewKey()
	for range 3 {
		req.Header.Set("Idempotency-Key", key)
		if _, err := client.Do(req); err == nil {
			return nil
		}
	}
	return nil
}

// 3. gRPC: a new key per attempt through WithNewKey.
func grpcLoop(ctx context.Context, call func(context.Context) error) error {
	for {
		if err := call(idemgrpc.WithNewKey(ctx)); err == nil { // want `the key of idemgrpc.WithNewKey is a new key, minted inside a retry loop`
			return nil
		}
	}
}

// Its twin: WithNewKey once.
func grpcLoopOnce(ctx context.Context, call func(context.Context) error) error {
	ctx = idemgrpc.WithNewKey(ctx)
	for {
		if err := call(ctx); err == nil {
			return nil
		}
	}
}

// 4. A key helper on the transport's NewKey, in a loop.
func newIdemKey() string { return "ik_" + idemgrpc.NewKey() } // want newIdemKey:`fresh\(idemgrpc.NewKey\(\)\)`

func grpcHelperLoop(ctx context.Context, call func(context.Context) error) error {
	for {
		if err := call(idemgrpc.WithKey(ctx, newIdemKey())); err == nil { // want `the key of idemgrpc.WithKey is skclient.newIdemKey\(\) \(idemgrpc.NewKey\(\)\), minted inside a retry loop`
			return nil
		}
	}
}

// A batch: one logical request per order, each its own key.
func chargeBatch(ctx context.Context, orders []string) {
	for _, o := range orders {
		_, _ = client.Do(newReq(idemhttp.WithKey(ctx, o+"-"+uuid.NewString())))
	}
}
