package runtime

import (
	"context"
	"encoding/binary"
	"os"
	"reflect"
)

// IsTimeout reports whether err says that an operation timed out, so that
// its outcome is unknown: [context.DeadlineExceeded], [os.ErrDeadlineExceeded],
// any error in the tree with a Timeout() bool method that returns true (net.Error,
// url.Error), or a gRPC status error with code DeadlineExceeded (detected
// without importing gRPC). Every error of the tree is asked, however wide
// or deep the tree; each is visited once, so a cyclic Unwrap ends the walk.
//
// The runtime records UNKNOWN for timeouts and also for [context.Canceled]
// (the caller went away in the middle of the effect), whatever the error
// policy: neither tells whether the effect happened.
func IsTimeout(err error) bool {
	return inTree(err, isTimeoutNode)
}

// isTimeoutNode reports whether e itself (not its tree) says it timed out.
// Every error in the tree is asked, not only the first with a Timeout
// method: a *url.Error's own Timeout() does not look through an error its
// Err wraps with %w.
func isTimeoutNode(e error) bool {
	if is(e, context.DeadlineExceeded) || is(e, os.ErrDeadlineExceeded) {
		return true
	}
	if t, ok := e.(interface{ Timeout() bool }); ok && t.Timeout() {
		return true
	}
	return grpcCode(e, grpcDeadlineExceeded)
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
	return inTree(err, func(e error) bool {
		return isTimeoutNode(e) || is(e, context.Canceled) || grpcCode(e, grpcCanceled)
	})
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
	if cl := markOf(err); cl != nil {
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

// grpcCode reports whether e has a GRPCStatus() method whose status has
// Code() == want.
func grpcCode(e error, want uint64) bool {
	m := reflect.ValueOf(e).MethodByName("GRPCStatus")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return false
	}
	st := m.Call(nil)[0]
	if st.Kind() == reflect.Pointer && st.IsNil() {
		return false
	}
	code := st.MethodByName("Code")
	if !code.IsValid() || code.Type().NumIn() != 0 || code.Type().NumOut() != 1 {
		return false
	}
	c := code.Call(nil)[0]
	return c.CanUint() && c.Uint() == want
}

// is reports whether e itself matches target as errors.Is matches one
// node of a tree: equal, or its Is method says so.
func is(e, target error) bool {
	if reflect.TypeOf(e).Comparable() && e == target {
		return true
	}
	x, ok := e.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// markOf returns err's mark: the first [Permanent] or [Retryable] in its
// tree, the one [Runtime.Classify] goes by; nil when it has none.
func markOf(err error) *classified {
	var cl *classified
	inTree(err, func(e error) bool {
		c, ok := e.(*classified)
		if ok {
			cl = c
		}
		return ok
	})
	return cl
}

// inTree reports whether match holds for an error of err's tree (err, and
// what Unwrap() error and Unwrap() []error return, depth first as
// errors.Is walks). It visits every error of the tree once however wide or
// deep the tree is, and a cyclic Unwrap ends the walk instead of looping:
// the visited set is keyed by each error's identity (see nodeKey).
func inTree(err error, match func(error) bool) bool {
	if err == nil {
		return false
	}
	stack := []error{err}
	seen := map[any]struct{}{}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		if k := nodeKey(e); k != nil {
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
		}
		if match(e) {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			for i := len(errs) - 1; i >= 0; i-- { // the first child is visited first
				stack = append(stack, errs[i])
			}
		}
	}
	return false
}

// refKey is the identity of an error that is a reference (a pointer, a
// map, a slice...) or holds references: its type and their addresses.
type refKey struct {
	t    reflect.Type
	refs string
}

// nodeKey returns a map key that is the same for an error met twice in a
// tree: the error itself when it is comparable, else its type and the
// addresses it holds (a cycle can only run through references). Nil for
// a value that holds none, which cannot be part of a cycle.
func nodeKey(e error) any {
	v := reflect.ValueOf(e)
	if v.Comparable() {
		return e
	}
	var refs []byte
	collectRefs(v, &refs)
	if len(refs) == 0 {
		return nil
	}
	return refKey{v.Type(), string(refs)}
}

// collectRefs appends the addresses (and slice lengths) that v holds at
// its top level and in its nested structs, arrays and interfaces.
func collectRefs(v reflect.Value, out *[]byte) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
	case reflect.Slice:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Len()))
	case reflect.Interface:
		if !v.IsNil() {
			collectRefs(v.Elem(), out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			collectRefs(v.Field(i), out)
		}
	case reflect.Array:
		for i := range v.Len() {
			collectRefs(v.Index(i), out)
		}
	}
}
