package runtime

import (
	"context"
	"errors"
	"os"
	"reflect"
)

// IsTimeout reports whether err says that an operation timed out, so that
// its outcome is unknown: [context.DeadlineExceeded], [os.ErrDeadlineExceeded],
// any error in the chain with a Timeout() bool method that returns true (net.Error,
// url.Error), or a gRPC status error with code DeadlineExceeded (detected
// without importing gRPC).
func IsTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	if errors.As(err, &t) && t.Timeout() {
		return true
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
