package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r48APIError is a downstream API's error as a value type: a status code
// and a list of details (a slice, so the type is not comparable).
type r48APIError struct {
	Status  int
	Details []string
}

func (e r48APIError) Error() string { return fmt.Sprintf("api: status %d", e.Status) }

// Timeout reports a gateway timeout.
func (e r48APIError) Timeout() bool { return e.Status == 504 }

// README, state machine: "A timeout anywhere in the error tree (...) are
// UNKNOWN under every error policy and whatever Permanent or Retryable
// says: never FAILED, never a release (runtime.Uncertain). ... "Anywhere"
// is every error of the tree, however wide (an errors.Join of a thousand
// downstream errors) or deep, each visited once". go doc IsTimeout: "any
// error in the tree with a Timeout() bool method that returns true ...
// Every error of the tree is asked".
//
// Schedule: the effect calls a downstream API twice (two line items); the
// API's error is a value type with a status and a Details slice (so not
// comparable), whose Timeout() is true for 504. One item is refused (400),
// the other times out (504); the effect joins both errors. Both errors have
// nil Details: the walk's "visited" key for a non-comparable error is its
// type plus the addresses it holds, the same for both, so the 504 is
// taken for the 400 already visited and never asked. IsTimeout and
// Uncertain say false, and Do records FAILED (under RecordFailed, or
// under any policy when the effect marks its error Permanent); the
// duplicate is told a permanent failure although the 504 item may have
// gone through.
func TestR48JoinedValueErrorsTimeoutMissed(t *testing.T) {
	joined := errors.Join(r48APIError{Status: 400}, r48APIError{Status: 504})
	if !(r48APIError{Status: 504}).Timeout() {
		t.Fatal("precondition")
	}
	if !runtime.IsTimeout(joined) {
		t.Errorf("IsTimeout(Join(400, 504)) = false; the 504 in the tree timed out")
	}
	for _, pol := range []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.RecordFailed, runtime.ReleaseRecord} {
		for _, permanent := range []bool{false, true} {
			rt, err := runtime.New(memstore.New(), runtime.WithErrorPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			call := runtime.Call[string, string]{Operation: "Orders.Pay", Key: "o1", Request: "r",
				Effect: func(context.Context, string) (string, error) {
					err := fmt.Errorf("paying two items: %w", errors.Join(r48APIError{Status: 400}, r48APIError{Status: 504}))
					if permanent {
						err = runtime.Permanent(err)
					}
					return "", err
				}}
			_, first := runtime.Do(ctx, rt, call)
			ran := false
			call.Effect = func(context.Context, string) (string, error) { ran = true; return "ok", nil }
			_, dup := runtime.Do(ctx, rt, call)
			var state string
			switch {
			case ran:
				state = "released"
			case errors.Is(dup, runtime.ErrOutcomeUnknown):
				state = "UNKNOWN"
			case errors.Is(dup, runtime.ErrPermanent):
				state = "FAILED"
			default:
				state = fmt.Sprint(dup)
			}
			if state != "UNKNOWN" {
				t.Errorf("policy %v, Permanent=%v: recorded %s (first call: %v; duplicate: %v), want UNKNOWN", pol, permanent, state, first, dup)
			}
		}
	}
}

var errR48GatewayTimeout = errors.New("r48: gateway timeout")

// r48TaggedError is r48APIError with an Is method for the caller's own
// sentinel.
type r48TaggedError struct {
	Status  int
	Details []string
}

func (e r48TaggedError) Error() string { return fmt.Sprintf("api: status %d", e.Status) }
func (e r48TaggedError) Is(target error) bool {
	return target == errR48GatewayTimeout && e.Status == 504
}

// runtime/unmarked.go (notPermanent, on the error returned for a released
// or UNKNOWN call): "Everything else in err's tree still matches (the
// timeout, the caller's own sentinels), and its message is unchanged".
// README: "A nested call's error the runtime returned as not final
// (UNKNOWN, or released ...) does not match ErrPermanent, and its timeout,
// status and marks still decide".
//
// Schedule: the effect returns Retryable(Permanent(fmt.Errorf("...: %w",
// errors.Join(E{400}, E{504})))) where E is a non-comparable value error
// (nil Details slice) whose Is matches the caller's sentinel for 504. The
// claim is released and the returned error is the runtime's "unmarked"
// wrapper; errors.Is(returned, sentinel) is false, though errors.Is on the
// effect's own error is true: the unmarked wrapper's walk takes E{504} for
// E{400}, already visited.
func TestR48UnmarkedHidesCallersSentinel(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var own error
	_, got := runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "Orders.Pay", Key: "o1", Request: "r",
		Effect: func(context.Context, string) (string, error) {
			own = runtime.Retryable(runtime.Permanent(fmt.Errorf("paying two items: %w",
				errors.Join(r48TaggedError{Status: 400}, r48TaggedError{Status: 504}))))
			return "", own
		}})
	if !errors.Is(own, errR48GatewayTimeout) {
		t.Fatal("precondition: the effect's own error matches the sentinel")
	}
	if errors.Is(got, runtime.ErrPermanent) {
		t.Errorf("released call's error matches ErrPermanent")
	}
	if !errors.Is(got, errR48GatewayTimeout) {
		t.Errorf("errors.Is(returned, caller's sentinel) = false; the effect's own error matches it (returned: %v)", got)
	}
}
