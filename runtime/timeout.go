package runtime

import (
	"context"
	"os"
	"reflect"

	"github.com/idemkit/idem/runtime/internal/errtree"
)

// IsTimeout reports whether err says that an operation timed out, so that
// its outcome is unknown: [context.DeadlineExceeded], [os.ErrDeadlineExceeded],
// any error in the tree with a Timeout() bool method that returns true (net.Error,
// url.Error), or a gRPC status error with code DeadlineExceeded (detected
// without importing gRPC). Every error of the tree is asked, however wide
// or deep the tree; each is visited once, so a cyclic Unwrap ends the walk.
// A tree of more than 65,536 errors (an Unwrap that makes a new error on
// every call never ends) is read that far, and counts as a timeout: what
// it holds past there is not known.
//
// The runtime records UNKNOWN for timeouts and also for [context.Canceled]
// (the caller went away in the middle of the effect), whatever the error
// policy: neither tells whether the effect happened.
func IsTimeout(err error) bool {
	found, complete := inTree(err, isTimeoutNode)
	return found || !complete
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
// the error tree ([IsTimeout]), a cancellation ([context.Canceled], or a
// gRPC status error with code Canceled, detected without importing gRPC),
// or a nested idem call whose own outcome is not known ([ErrOutcomeUnknown],
// also when replayed from its UNKNOWN record; [ErrInProgress]: it is still
// running elsewhere; [ErrLeaseLost]: another worker took it over), and the
// cause the lease rule cancels an effect's context with (an effect that
// returns context.Cause(ctx) says it was stopped: an [ErrLeaseLost]). None
// tells whether the effect happened, so the
// runtime records UNKNOWN. A tree too large to read whole is uncertain, as
// for IsTimeout.
//
// Adapters that turn a handler's answer into an effect error (idemhttp,
// idemgrpc, generated wrappers) must ask Uncertain first and hand such an
// error to the runtime as it is, its tree intact; see [Runtime.Classify].
func Uncertain(err error) bool {
	if err == nil {
		return false
	}
	found, complete := inTree(err, func(e error) bool {
		return isTimeoutNode(e) || is(e, context.Canceled) || grpcCode(e, grpcCanceled) ||
			is(e, ErrOutcomeUnknown) || is(e, ErrInProgress) || is(e, ErrLeaseLost)
	})
	return found || !complete
}

// Classify returns the state rt records for an effect that returned err:
// [StateSuccess] for nil; [StateUnknown] for an [Uncertain] error, whatever
// [Permanent] or [Retryable] says and whatever the error policy;
// [StateFailed] for a [Permanent] error; "" (the record is released) for a
// [Retryable] one (the first of the two in the tree decides); [StateFailed]
// for an unmarked error that matches [ErrPermanent] (the sentinel wrapped,
// a nested call's [FailedError]); otherwise what the runtime's
// [ErrorPolicy] says. It is the one place that decides: [Do], the adapters,
// generated wrappers and pgstore's DoTx all follow it.
func (rt *Runtime) Classify(err error) State {
	switch {
	case err == nil:
		return StateSuccess
	case Uncertain(err):
		return StateUnknown
	}
	switch classOf(err) {
	case classPermanent:
		return StateFailed
	case classRetryable:
		return ""
	}
	switch rt.cfg.errorPolicy {
	case RecordFailed:
		return StateFailed
	case ReleaseRecord:
		return ""
	}
	return StateUnknown
}

// Marked reports what err's marks ask for, as [Runtime.Classify] reads
// them: [StateFailed] for a [Permanent] error or an unmarked one matching
// [ErrPermanent], "" (release) for a [Retryable] one (the first of the two
// in the tree decides), and ok false when err says neither, so that the
// error policy would decide. It does not ask [Uncertain], which Classify
// asks first. Adapters that map errors of their own kind (a gRPC status, an
// HTTP status) use it to let a mark the handler set win over that mapping.
func Marked(err error) (state State, ok bool) {
	switch classOf(err) {
	case classPermanent:
		return StateFailed, true
	case classRetryable:
		return "", true
	}
	return "", false
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
func is(e, target error) bool { return errtree.IsNode(e, target) }

// classOf returns how err is marked: its mark (the first [Permanent] or
// [Retryable] in its tree: Retryable(Permanent(x)) is retryable), else
// classPermanent when an error of its tree matches [ErrPermanent] (the
// sentinel wrapped, a [FailedError] a nested call replayed), else
// classDefault (the error policy decides). Every door reads it: Classify,
// so runtime.Do, the adapters and generated wrappers, and DoTx.
func classOf(err error) errorClass {
	if cl := markOf(err); cl != nil {
		return cl.class
	}
	// Not through an error the runtime unmarked (notPermanent): a nested
	// call's failure that was not recorded is no permanent failure here
	// either.
	if errtree.Walk(err, func(e error) bool { return is(e, ErrPermanent) }) {
		return classPermanent
	}
	return classDefault
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
// errors.Is walks), visiting each error once: a cyclic Unwrap ends the walk
// (see [errtree.Walk]). complete is false when the tree was too large to
// read whole ([errtree.MaxVisits]).
//
// It also walks the tree an error the runtime unmarked holds (see
// notPermanent, which hides it from errors.Is and errors.As only for
// ErrPermanent and *FailedError): a nested call's timeout, cancellation,
// gRPC status and marks still decide the outer call's outcome. One visited
// set serves the whole walk, through every unmarked error.
func inTree(err error, match func(error) bool) (found, complete bool) {
	return errtree.WalkVeiled(err, match)
}
