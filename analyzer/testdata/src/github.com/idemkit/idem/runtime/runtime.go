// Package runtime is a stub of the idem runtime's error constructors.
package runtime

import "errors"

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
