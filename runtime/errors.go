package runtime

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/runtime/internal/canon"
)

// Sentinel errors. Test for them with [errors.Is]; the runtime wraps them
// with the operation and key involved.
var (
	// ErrInProgress: another call with the same identity is still being
	// processed and did not finish within MaxWait. The effect was not run;
	// retry later (HTTP: 409 Conflict with Retry-After).
	ErrInProgress = errors.New("idem: request with this key is still in progress")

	// ErrKeyReused: the key was used before with a different request payload
	// (fingerprint). This is a client bug (HTTP: 422 Unprocessable Entity).
	ErrKeyReused = errors.New("idem: idempotency key reused with a different request")

	// ErrOutcomeUnknown: an earlier attempt timed out, panicked or failed in
	// a way that does not tell whether the effect happened, and it could not
	// be converged yet. The effect is not run again; the reconciler will
	// converge the record (HTTP: 409 or 503 with Retry-After).
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")

	// ErrInvalidKey: the key is empty, longer than 255 bytes or contains
	// bytes outside visible ASCII (HTTP: 400 Bad Request).
	ErrInvalidKey = errors.New("idem: invalid idempotency key")

	// ErrLeaseLost: this worker's lease on the record was taken over by
	// another worker (its version moved on); this worker's transition was
	// rejected and changed nothing. It is also the cause of an effect's
	// context cancelled because the lease could not be confirmed before it
	// could expire (the lease rule: see the README).
	ErrLeaseLost = errors.New("idem: lease lost")

	// ErrPermanent marks errors that are stored as FAILED and replayed to
	// duplicates. See [Permanent].
	ErrPermanent = errors.New("idem: permanent failure")

	// ErrNotFound is returned by [Store.Get] when there is no record.
	ErrNotFound = errors.New("idem: record not found")

	// ErrNotRecorded: the effect succeeded (it ran, or the operation's
	// Query found it done) and its response is returned together with this
	// error, but its outcome could not be recorded: the store failed, or did
	// not answer, until the completion timeout. Use the response: the effect
	// happened. If the write was not applied, the record stays as it was
	// (PROCESSING or UNKNOWN) until its lease expires; a duplicate then
	// takes it over and, with a Query, converges it, or, without one, runs
	// the effect again (the at-least-once window). If the store applied it
	// and answered too late, duplicates replay it.
	ErrNotRecorded = errors.New("idem: the effect succeeded but its outcome was not recorded")

	// ErrTooLarge: a request or response is larger than the store accepts.
	ErrTooLarge = errors.New("idem: record too large")

	// ErrNotReplayable: the call with this identity succeeded, but its
	// response was not stored (larger than the store accepts, or not
	// encodable), or was stored but cannot be decoded as the caller's
	// response type (an interface type, a type changed since), so it
	// cannot be replayed. The effect is not run again;
	// the answer is stable for the record's TTL (HTTP: 409 or 410; a client
	// must look the result up another way).
	ErrNotReplayable = errors.New("idem: succeeded, but the response was not stored and cannot be replayed")

	// ErrNotComparable: the request holds a part no fingerprint can
	// compare (a func, a chan or an unsafe.Pointer that is not nil, or a
	// cycle of pointers) where its JSON encoding does not reach, so the
	// default fingerprint cannot tell it from another request. The call is
	// refused before any claim; the error names the field. Set
	// [Call.Fingerprint], or keep the part out of the request type.
	ErrNotComparable = canon.ErrNotComparable
)

// Permanent marks err as a permanent failure of the effect: the record
// becomes FAILED, err's message (and code, see [Coder]) is stored, and
// duplicates get the same failure back without running the effect. Use it for
// definitive business rejections (card declined, validation failed).
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: classPermanent}
}

// Retryable marks err as a failure that happened before any effect: the
// record is released and a retry runs the effect again. Only use it when you
// know nothing happened downstream (for example the request never left the
// process). Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: classRetryable}
}

type errorClass int

const (
	classDefault errorClass = iota
	classPermanent
	classRetryable
)

type classified struct {
	err   error
	class errorClass
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }
func (e *classified) Is(target error) bool {
	return target == ErrPermanent && e.class == classPermanent
}

// Coder is implemented by errors that carry a stable, machine-readable code.
// The code of a permanent error is stored with its message and returned by
// [FailedError.Code] on replay.
type Coder interface {
	ErrorCode() string
}

// FailedError is the error replayed to a duplicate of a call that failed
// permanently. It matches [ErrPermanent] with [errors.Is].
type FailedError struct {
	Operation string
	Key       string
	// Code is the error's [Coder] code, if it had one.
	Code string
	// Message is the original error's message (cut or left out when the
	// store refused it as too large: see [Detailer]).
	Message string
	// Detail is the original error's [Detailer] payload, if it had one and
	// the store took it.
	Detail []byte
}

func (e *FailedError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("idem: %s %q failed permanently (%s): %s", e.Operation, e.Key, e.Code, e.Message)
	}
	return fmt.Sprintf("idem: %s %q failed permanently: %s", e.Operation, e.Key, e.Message)
}

// Is reports whether target is ErrPermanent.
func (e *FailedError) Is(target error) bool { return target == ErrPermanent }

// ErrorCode returns the stored code.
func (e *FailedError) ErrorCode() string { return e.Code }

// PanicError is returned when the effect panicked and the runtime was
// configured with [WithRecoverPanics]; the record is UNKNOWN. A query's
// panic is one too, whose message says "query panicked" (in a record's
// note, when a reconciler gives up).
type PanicError struct {
	Value any
	Stack []byte
	// of is what panicked, "" for the effect.
	of string
}

func (e *PanicError) Error() string {
	of := e.of
	if of == "" {
		of = "effect"
	}
	return fmt.Sprintf("idem: %s panicked: %v", of, e.Value)
}
