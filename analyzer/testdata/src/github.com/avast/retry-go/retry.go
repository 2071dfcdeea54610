// Package retry is a minimal stub of github.com/avast/retry-go.
package retry

type Option func()

// Do calls fn until it succeeds.
func Do(fn func() error, opts ...Option) error { return fn() }
