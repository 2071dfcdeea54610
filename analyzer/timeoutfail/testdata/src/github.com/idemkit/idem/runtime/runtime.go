// Package runtime is a stub of the idem runtime's error constructors.
package runtime

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }

// Permanent marks err as a permanent failure: the record becomes FAILED.
func Permanent(err error) error { return &permanentError{err} }

// Unknown marks err as an unknown outcome: the record becomes UNKNOWN.
func Unknown(err error) error { return err }
