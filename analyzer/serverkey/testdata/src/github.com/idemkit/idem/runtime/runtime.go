// Package runtime is a stub of the idem runtime's Do and Call.
package runtime

import "context"

type Runtime struct{}

// Call is one idempotent call.
type Call[Req, Resp any] struct {
	Operation string
	Key       string
	Request   Req
	Effect    func(ctx context.Context, req Req) (Resp, error)
}

// Do runs c.Effect at most once per key.
func Do[Req, Resp any](ctx context.Context, rt *Runtime, c Call[Req, Resp]) (Resp, error) {
	return c.Effect(ctx, c.Request)
}
