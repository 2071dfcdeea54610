// Package runtime is a stub of the idem runtime: its error constructors,
// Do and Call.
package runtime

import (
	"context"
	"errors"
)

// ErrPermanent marks errors that are stored as FAILED.
var ErrPermanent = errors.New("idem: permanent failure")

type classified struct{ err error }

func (e *classified) Error() string { return e.err.Error() }

// Permanent marks err as a permanent failure: the record becomes FAILED.
func Permanent(err error) error { return &classified{err} }

// Retryable marks err as a failure before any effect: the record is
// released and a retry runs the effect again.
func Retryable(err error) error { return &classified{err} }

// Unknown marks err as an unknown outcome: the record becomes UNKNOWN.
func Unknown(err error) error { return err }

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
