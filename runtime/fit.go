package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The size rule: an outcome is always recorded, whatever its size. When the
// store refuses a transition as [ErrTooLarge], it is written again smaller,
// step by step, until the store takes it:
//
//   - SUCCESS: the response is replaced by its [Cutter] form when its type
//     has one (duplicates get that), then left out (duplicates get
//     [ErrNotReplayable]: the effect happened and is never run again);
//   - FAILED: the failure's [Detailer] payload is dropped, then its message
//     is cut to [shortFailureMessage] bytes, then left out (the code stays:
//     duplicates still get a [*FailedError]), then the stored failure is
//     empty ("failed"), the code too when even it is refused;
//   - any state: the record's note is cut, then left out.
//
// Each step says in the note what was left out. Only when even the smallest
// form is refused does the write fail with ErrTooLarge.
const shortFailureMessage = 256

// Cutter is a response type that can say in a few bytes what it was, for
// the size rule: when the store refuses a SUCCESS response as too large,
// the value Cut returns is recorded (and replayed to duplicates) in its
// place; only when that too is refused is the response left out. An HTTP
// answer keeps its status this way (idemhttp.Response), so a duplicate of
// a 422 too large to store learns it was a 422, never that it succeeded.
type Cutter[Resp any] interface {
	Cut() Resp
}

// responseCutter gives the encoded short form of the response being
// recorded (nil when it has none).
type responseCutter interface{ cutResponse() []byte }

// cutFunc is a responseCutter from a function (a registered query's).
type cutFunc func() []byte

func (f cutFunc) cutResponse() []byte { return f() }

// transitioner writes a transition: a [Store], or a [Local] inside its
// transaction.
type transitioner interface {
	Transition(ctx context.Context, p TransitionParams) (int64, error)
}

// fitTransition runs tp on store, shrinking it as the size rule says while
// the store answers ErrTooLarge. It updates *tp to what was written.
//
// c, when not nil, gives the short form of a SUCCESS response ([Cutter]).
func fitTransition(ctx context.Context, store transitioner, tp *TransitionParams, c responseCutter) (int64, error) {
	v, err := store.Transition(ctx, *tp)
	// Each step makes the record smaller, and there are a handful of
	// steps; the bound is a guard, never reached.
	for steps := 0; errors.Is(err, ErrTooLarge) && steps < 64; steps++ {
		if !shrink(tp, err, &c) {
			return v, err
		}
		v, err = store.Transition(ctx, *tp)
	}
	return v, err
}

// shrink makes tp one step smaller; false when it cannot be made smaller.
func shrink(tp *TransitionParams, cause error, c *responseCutter) bool {
	if tp.To == StateSuccess && !tp.ResponseOmitted && *c != nil {
		b := (*c).cutResponse()
		*c = nil
		if b != nil && len(b) < len(tp.Response) {
			tp.Note = joinNote(tp.Note, fmt.Sprintf("response cut: %d bytes, more than the store accepts (%v); its short form is stored", len(tp.Response), cause))
			tp.Response = b
			return true
		}
	}
	switch {
	case tp.To == StateSuccess && !tp.ResponseOmitted:
		tp.Note = joinNote(tp.Note, fmt.Sprintf("response not stored: %d bytes, more than the store accepts (%v)", len(tp.Response), cause))
		tp.Response, tp.ResponseOmitted = nil, true
		return true
	case tp.To == StateFailed && len(tp.Response) > 0:
		if smaller, what, ok := shrinkFailure(tp.Response); ok {
			tp.Response = smaller
			tp.Note = joinNote(tp.Note, what+" (the store refused the failure as too large)")
			return true
		}
	}
	switch {
	case len(tp.Note) > shortFailureMessage:
		tp.Note = cut(tp.Note, shortFailureMessage)
		return true
	case tp.Note != "":
		tp.Note = ""
		return true
	}
	return false
}

// shrinkFailure returns the encoded failure one step smaller and what was
// left out; false when it is as small as it gets.
func shrinkFailure(data []byte) ([]byte, string, bool) {
	f, err := parseFailure(data)
	switch {
	case err != nil:
		return encodeFailure(failure{}), "failure not stored: it could not be decoded", true
	case len(f.Detail) > 0:
		n := len(f.Detail)
		f.Detail = nil
		return encodeFailure(f), fmt.Sprintf("failure detail not stored (%d bytes)", n), true
	case len(f.Message) > shortFailureMessage:
		n := len(f.Message)
		f.Message = cut(f.Message, shortFailureMessage)
		return encodeFailure(f), fmt.Sprintf("failure message cut from %d bytes", n), true
	case f.Message != "":
		n := len(f.Message)
		f.Message = ""
		return encodeFailure(f), fmt.Sprintf("failure message not stored (%d bytes)", n), true
	case len(f.Code) > shortFailureMessage:
		f.Code = cut(f.Code, shortFailureMessage)
		return encodeFailure(f), "failure code cut", true
	case len(data) > 2 && f.Code == "":
		return []byte("{}"), "failure not stored", true
	case len(data) > 2:
		// A store that refuses even the code (a limit of a few dozen
		// bytes): the failure is recorded all the same, as "failed".
		return []byte("{}"), fmt.Sprintf("failure code %q not stored", cut(f.Code, 64)), true
	}
	return nil, "", false
}

func joinNote(note, add string) string {
	if note == "" {
		return add
	}
	return cut(note, shortFailureMessage) + "; " + add
}

// cut shortens s to at most n bytes of valid UTF-8, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	return strings.ToValidUTF8(s[:max(0, n-len(mark))], "") + mark
}
