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
	return grpcCode(err, grpcDeadlineExceeded)
}

// Uncertain reports whether err leaves the outcome of an effect unknown,
// whatever its marking and the runtime's [ErrorPolicy]: a timeout anywhere in
// the error tree ([IsTimeout]) or a cancellation ([context.Canceled], or a
// gRPC status error with code Canceled, detected without importing gRPC).
// Neither tells whether the effect happened, so the runtime records UNKNOWN.
//
// Adapters that turn a handler's answer into an effect error (idemhttp,
// idemgrpc, generated wrappers) must ask Uncertain first and hand such an
// error to the runtime as it is, its tree intact; see [Runtime.Classify].
func Uncertain(err error) bool {
	if err == nil {
		return false
	}
	return IsTimeout(err) || errors.Is(err, context.Canceled) || grpcCode(err, grpcCanceled)
}

// Classify returns the state rt records for an effect that returned err:
// [StateSuccess] for nil; [StateUnknown] for an [Uncertain] error, whatever
// [Permanent] or [Retryable] says and whatever the error policy;
// [StateFailed] for a [Permanent] error; "" (the record is released) for a
// [Retryable] one; otherwise what the runtime's [ErrorPolicy] says. It is
// the one place that decides: [Do], the adapters and generated wrappers all
// follow it.
func (rt *Runtime) Classify(err error) State {
	switch {
	case err == nil:
		return StateSuccess
	case Uncertain(err):
		return StateUnknown
	}
	var cl *classified
	if errors.As(err, &cl) {
		switch cl.class {
		case classPermanent:
			return StateFailed
		case classRetryable:
			return ""
		}
	}
	switch rt.cfg.errorPolicy {
	case RecordFailed:
		return StateFailed
	case ReleaseRecord:
		return ""
	}
	return StateUnknown
}

// gRPC status codes the runtime recognises (google.golang.org/grpc/codes).
const (
	grpcCanceled         = 1
	grpcDeadlineExceeded = 4
)

// grpcCode walks the tree for an error with a GRPCStatus() method whose
// status has Code() == want.
func grpcCode(err error, want uint64) bool {
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
		if c.CanUint() && c.Uint() == want {
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
