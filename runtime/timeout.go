package runtime

import (
	"context"
	"errors"
	"os"
	"reflect"
)

// IsTimeout reports whether err says that an operation timed out, so that
// its outcome is unknown: [context.DeadlineExceeded], [os.ErrDeadlineExceeded],
// any error in the tree with a Timeout() bool method that returns true (net.Error,
// url.Error), or a gRPC status error with code DeadlineExceeded (detected
// without importing gRPC).
//
// The runtime records UNKNOWN for timeouts and also for [context.Canceled]
// (the caller went away in the middle of the effect), whatever the error
// policy: neither tells whether the effect happened.
func IsTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	// Every error in the tree is asked, not only the first with a Timeout
	// method: a *url.Error's own Timeout() does not look through an error
	// its Err wraps with %w.
	for _, e := range chain(err) {
		if t, ok := e.(interface{ Timeout() bool }); ok && t.Timeout() {
			return true
		}
	}
	return grpcDeadline(err)
}

// grpcDeadline walks the chain for an error with a GRPCStatus() method whose
// status has Code() == DeadlineExceeded (4).
func grpcDeadline(err error) bool {
	const deadlineExceeded = 4
	for _, e := range chain(err) {
		m := reflect.ValueOf(e).MethodByName("GRPCStatus")
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			continue
		}
		st := m.Call(nil)[0]
		if st.Kind() == reflect.Pointer && st.IsNil() {
			continue
		}
		code := st.MethodByName("Code")
		if !code.IsValid() || code.Type().NumIn() != 0 || code.Type().NumOut() != 1 {
			continue
		}
		c := code.Call(nil)[0]
		if c.CanUint() && c.Uint() == deadlineExceeded {
			return true
		}
	}
	return false
}

func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if e == nil || len(out) > 64 {
			return
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}
