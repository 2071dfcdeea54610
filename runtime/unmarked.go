package runtime

import (
	"reflect"

	"github.com/idemkit/idem/runtime/internal/errtree"
)

// notPermanent returns err, an effect's or a query's error the runtime did
// not record as FAILED (it recorded UNKNOWN, or released the claim), so that
// it no longer matches [ErrPermanent] or [*FailedError]: a caller told
// either takes the call's failure as final, though a duplicate may still
// run the effect (a timeout marked Permanent, Retryable(Permanent(x)), a
// query that erred with a nested call's failure). Everything else in err's
// tree still matches (the timeout, the caller's own sentinels), and its
// message is unchanged. An err that does not match ErrPermanent is
// returned as it is.
func notPermanent(err error) error {
	if err == nil || !errorIs(err, ErrPermanent) {
		return err
	}
	return &unmarkedError{err: err}
}

// unmarkedError is err without the permanent failure in its tree: it has
// no Unwrap, and answers errors.Is and errors.As for the rest of err's tree.
// The runtime's own walks read err's whole tree ([errtree.Veiled]): a
// nested call's timeout, cancellation, gRPC status and marks still decide
// the outer call's outcome.
type unmarkedError struct{ err error }

func (e *unmarkedError) Error() string { return errorText(e.err) }

// Veiled returns the error e holds, for the runtime's walks.
func (e *unmarkedError) Veiled() error { return e.err }

// Is reports whether err's tree matches target, ErrPermanent aside. It
// reads err's tree once, through the unmarked errors nested in it (a call's
// error that joins those its nested calls returned), not once per path.
func (e *unmarkedError) Is(target error) (ok bool) {
	if target == ErrPermanent {
		return false
	}
	returned := false
	defer func() {
		if !returned {
			recover()
			ok = false
		}
	}()
	ok = errtree.IsVeiled(e.err, target)
	returned = true
	return ok
}

// As finds the first error of err's tree (read as Is reads it) that fills
// target, skipping a [FailedError] (also one an interface target, such as
// runtime.Coder or error, would take).
func (e *unmarkedError) As(target any) (ok bool) {
	if _, failed := target.(**FailedError); failed {
		return false
	}
	returned := false
	defer func() {
		if !returned {
			recover()
			ok = false
		}
	}()
	v := reflect.ValueOf(target).Elem()
	ok, _ = errtree.WalkVeiled(e.err, func(n error) bool {
		if !errtree.AsNode(n, target) {
			return false
		}
		if _, failed := v.Interface().(*FailedError); failed {
			v.SetZero()
			return false
		}
		return true
	})
	returned = true
	return ok
}
