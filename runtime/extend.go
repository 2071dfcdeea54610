package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/idemkit/idem/runtime/internal/canon"
	"github.com/idemkit/idem/runtime/internal/errtree"
)

// This file is the runtime's surface for code that runs calls its own way:
// store packages with their own modes (pgstore.DoTx runs a call inside the
// caller's transaction), HTTP adapters, generated wrappers.

// NewIdentity returns the validated identity of a call on operation with key,
// in the scope of ctx (see [WithScope]).
func NewIdentity(ctx context.Context, operation, key string) (Identity, error) {
	id := Identity{Scope: ScopeFrom(ctx), Operation: operation, Key: key}
	if err := validateIdentity(id); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// EncodeRequest encodes req as [Do] does and returns its fingerprint and
// its encoding (what a record stores), both fresh slices: fingerprint
// itself when it is not nil (see [Call.Fingerprint]), else the runtime's
// fingerprint of req, the one [Do] compares (see [Call.Fingerprint] for
// what it covers). A call run its own way must use it, or its records and
// [Do]'s would disagree on whether a duplicate is the same request.
func EncodeRequest[Req any](rt *Runtime, req Req, fingerprint []byte) (fp, encoded []byte, err error) {
	return encodeRequest(rt, &req, fingerprint)
}

// FingerprintOf returns the default codec's fingerprint of v, whatever
// rt's codec: the SHA-256 of json.Marshal(v) when that encoding holds all
// of v, else the SHA-256 of a canonical encoding of every part of v (see
// [Call.Fingerprint]). v is seen as json.Marshal sees it: pass a pointer to
// a value whose MarshalJSON or MarshalText has a pointer receiver.
// Generated wrappers use it for the fingerprint of chosen fields (idemgen's
// fingerprint=).
func (rt *Runtime) FingerprintOf(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	fp, err := valueFingerprint(&rt.enc.canon, reflect.ValueOf(v))
	if err != nil || fp != nil {
		return fp, err
	}
	if canon.LossyUTF8(b) {
		return canonicalFingerprint(&rt.enc.canon, reflect.ValueOf(v))
	}
	return Fingerprint(b), nil
}

// Codec returns the runtime's codec.
func (rt *Runtime) Codec() Codec { return rt.cfg.codec }

// MaxWait returns how long a duplicate waits for a call in flight.
func (rt *Runtime) MaxWait() time.Duration { return rt.cfg.maxWait }

// CompletionTimeout returns the bound on recording an outcome.
func (rt *Runtime) CompletionTimeout() time.Duration { return rt.cfg.completionTimeout }

// RetryWrite runs write, a write of a record outside any transaction of
// the caller's, as the runtime records outcomes: on a context the caller
// cannot cancel, bounded by the completion timeout, retrying transient
// store errors with backoff. [ErrLeaseLost] and [ErrTooLarge] are final;
// the last error is returned when the time is up.
func (rt *Runtime) RetryWrite(ctx context.Context, write func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.completionTimeout)
	defer cancel()
	return retryWrite(wctx, nil, write, nil)
}

// WithAttempt returns a context carrying a, for an effect run outside [Do].
// Its DownstreamKey field is ignored: the key is always derived from a.ID.
func WithAttempt(ctx context.Context, a Attempt) context.Context {
	return withAttempt(ctx, nil, a.ID, a.FencingToken, a.TakenOver)
}

// maxFailureMessage bounds the message kept in a FAILED record, so that a
// huge error text does not make every failure large; the size rule
// ([fitTransition]) shortens it further when the store still refuses it.
const maxFailureMessage = 4 << 10

// Detailer is implemented by permanent errors that carry a machine-readable
// payload to store with the failure (for example a gRPC status with its
// details). The payload is stored with the FAILED record when the store's
// record limit allows and replayed as [FailedError.Detail]; over the limit
// it is the first thing left out, then the message is shortened: the
// failure itself is always recorded.
type Detailer interface {
	FailureDetail() []byte
}

// EncodeFailure encodes a permanent failure (its message, cut to 4 KiB, its
// [Coder] code and its [Detailer] payload) as stored in a FAILED record.
func EncodeFailure(err error) []byte {
	f := failure{Message: "failed"}
	if err != nil {
		// The error's methods are code of the caller's: one that panics
		// (a nil pointer error) leaves a note in the record, and the call
		// that records it goes on.
		f.Message = cut(errorText(err), maxFailureMessage)
		func() {
			returned := false
			defer func() {
				if !returned {
					recover()
					f.Code, f.Detail = "", nil
				}
			}()
			if c, ok := errtree.As[Coder](err); ok {
				f.Code = c.ErrorCode()
			}
			if d, ok := errtree.As[Detailer](err); ok {
				f.Detail = d.FailureDetail()
			}
			returned = true
		}()
	}
	return encodeFailure(f)
}

// errorIs is errors.Is(err, target) for an error of the caller's, whose
// Unwrap or Is methods may panic (a typed nil pointer): a panic reads as
// false.
func errorIs(err, target error) (is bool) {
	returned := false
	defer func() {
		if !returned {
			recover()
			is = false
		}
	}()
	is = errtree.Is(err, target)
	returned = true
	return is
}

// errorPermanent reports whether err is a permanent failure as
// [Runtime.Classify] reads it (see classOf); false if one of err's methods
// panics.
func errorPermanent(err error) (p bool) {
	returned := false
	defer func() {
		if !returned {
			recover()
			p = false
		}
	}()
	p = classOf(err) == classPermanent
	returned = true
	return p
}

// errorUncertain is [Uncertain](err), or true if one of err's methods
// panics: an error that cannot be read tells nothing certain.
func errorUncertain(err error) (u bool) {
	returned := false
	defer func() {
		if !returned {
			recover()
			u = true
		}
	}()
	u = Uncertain(err)
	returned = true
	return u
}

// errorText is err.Error(), or a note of its panic.
func errorText(err error) (s string) {
	returned := false
	defer func() {
		if !returned {
			s = fmt.Sprintf("%T (its Error method panicked: %v)", err, recover())
		}
	}()
	s = err.Error()
	returned = true
	return s
}

type failure struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Detail  []byte `json:"detail,omitempty"`
}

// encodeFailure encodes f as JSON without HTML escaping: a gateway's HTML
// error page must not grow six times in the record.
func encodeFailure(f failure) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(f) // strings and bytes always encode
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// parseFailure decodes a stored failure; an empty one (a failure the size
// rule could not keep) is a failure with no message.
func parseFailure(data []byte) (failure, error) {
	var f failure
	if len(bytes.TrimSpace(data)) == 0 {
		return f, nil
	}
	err := json.Unmarshal(data, &f)
	return f, err
}

func decodeFailure(id Identity, data []byte) error {
	fe, err := DecodeFailure(id, data)
	if err != nil {
		return err
	}
	return fe
}

// Replay returns what a duplicate with fingerprint gets from rec without
// running anything: the stored response (SUCCESS; [ErrNotReplayable] when
// it was not stored), a [*FailedError]
// (FAILED), [ErrKeyReused] when the fingerprints differ, [ErrOutcomeUnknown]
// (UNKNOWN) or [ErrInProgress] (PROCESSING).
func Replay[Resp any](rt *Runtime, rec Record, fingerprint []byte) (Resp, error) {
	var resp Resp
	err := replayInto(rt, rec, fingerprint, &resp)
	return resp, err
}

// replayInto is [Replay], decoding the response into *resp.
func replayInto[Resp any](rt *Runtime, rec Record, fingerprint []byte, resp *Resp) error {
	id := rec.ID
	if !bytes.Equal(rec.Fingerprint, fingerprint) {
		return fmt.Errorf("%w: %s %q was first used with another request", ErrKeyReused, id.Operation, id.Key)
	}
	switch rec.State {
	case StateSuccess:
		if rec.ResponseOmitted {
			return fmt.Errorf("%w: %s %q (%s)", ErrNotReplayable, id.Operation, id.Key, rec.Note)
		}
		if err := decodeResponse(rt, rec.Response, resp); err != nil {
			// Stored, but not as the caller's type (an interface, a type
			// changed since): not replayable, and not a reason to run the
			// effect again (review r55: it matched no sentinel).
			return fmt.Errorf("%w: %s %q: decoding stored response: %w", ErrNotReplayable, id.Operation, id.Key, err)
		}
		return nil
	case StateFailed:
		return decodeFailure(id, rec.Response)
	case StateUnknown:
		return fmt.Errorf("%w: %s %q: an earlier attempt may or may not have taken effect; it will be reconciled", ErrOutcomeUnknown, id.Operation, id.Key)
	case StateProcessing:
		return fmt.Errorf("%w: %s %q", ErrInProgress, id.Operation, id.Key)
	}
	return fmt.Errorf("idem: %s %q: record in unknown state %q", id.Operation, id.Key, rec.State)
}
