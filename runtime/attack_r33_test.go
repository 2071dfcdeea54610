package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
)

// r33UnwrapNilPanic is an effect's error (a downstream client's wrapper)
// whose Unwrap panics with nil; under GODEBUG=panicnil=1 recover then
// returns nil.
type r33UnwrapNilPanic struct{}

func (r33UnwrapNilPanic) Error() string { return "gateway: connection reset" }
func (r33UnwrapNilPanic) Unwrap() error { panic(nil) }

// README.md:727-730 (Observability): "A panic is told by the code not
// returning, not by recover's value: panic(nil) under GODEBUG=panicnil=1
// (the default of a main module whose go.mod says go 1.20 or older) is a
// panic like any other, never a return." and README.md:716-718: "an error
// whose Error method panics is recorded with a note saying so (also when
// its Unwrap or Is panics: the error is then not taken for a permanent
// one)". README.md:170-174: an unclassified error "is UNKNOWN unless you
// choose another policy".
//
// runEffect (do.go:651) returns errtree.Acyclic(err) for the effect's
// error; Acyclic (errtree.go:161-168) walks the error's Unwrap under a
// deferred recover that sets its result only when recover's value is not
// nil. An Unwrap that panics with nil under panicnil=1 makes Acyclic
// return nil: the effect's error is gone, and runtime.Do records SUCCESS
// with the zero response, returns no error to its caller and replays that
// "success" to every retry. The effect failed (its outcome is unknown).
func TestR33EffectErrorUnwrapPanicNilRecordedSuccess(t *testing.T) {
	testenv.SetPanicNil(t)
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := idem.New(st.New(t), idem.WithLease(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := idem.WithScope(context.Background(), teststores.Unique())
			var runs atomic.Int64
			call := idem.Call[string, string]{
				Operation: "r33.Charge", Key: "k1", Request: "100 EUR",
				Effect: func(context.Context, string) (string, error) {
					runs.Add(1)
					return "", r33UnwrapNilPanic{}
				},
			}
			testenv.Within(t, 15*time.Second, func() {
				resp, err := idem.Do(ctx, rt, call)
				t.Logf("first: %q, %v", resp, err)
				if err == nil {
					t.Errorf("the effect returned an error (whose Unwrap panics with nil) and runtime.Do returned success (%q, nil)", resp)
				}
				rec, gerr := rt.Store().Get(context.Background(), idem.Identity{Scope: idem.ScopeFrom(ctx), Operation: "r33.Charge", Key: "k1"})
				if gerr == nil && rec.State == idem.StateSuccess {
					t.Errorf("the record of an effect that returned an error is SUCCESS (note %q)", rec.Note)
				}
				resp, err = idem.Do(ctx, rt, call)
				if err == nil && runs.Load() == 1 {
					t.Errorf("a retry was replayed a success (%q) for an effect that returned an error", resp)
				}
				if errors.Is(err, idem.ErrPermanent) {
					t.Errorf("retry: %v: taken for a permanent failure", err)
				}
			})
		})
	}
}
