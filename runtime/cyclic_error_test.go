package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestCyclicEffectErrorReturnedWalkable: the error runtime.Do returns for
// an effect whose error unwraps in a cycle is flattened (README, the
// classification rule), so that the caller's own errors.Is and errors.As
// on it end, and still find what the effect's error held: its mark, the
// sentinel it wrapped, its own value.
func TestCyclicEffectErrorReturnedWalkable(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(error) error
	}{
		{"unmarked", func(e error) error { return e }},
		{"retryable", idem.Retryable},
		{"permanent", idem.Permanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := idem.New(memstore.New(), idem.WithErrorPolicy(idem.ReleaseRecord))
			if err != nil {
				t.Fatal(err)
			}
			var stop atomic.Bool
			defer stop.Store(true)
			cyc := &r30Cycle{&stop}
			done := make(chan struct{})
			go func() {
				defer close(done)
				// Do itself must end too: its own walks of the error
				// (the lease-lost check of a released call) are errors.Is.
				_, err := idem.Do(context.Background(), rt, idem.Call[string, int]{Operation: "cyclic.returned", Key: tc.name, Request: "r",
					Effect: func(ctx context.Context, req string) (int, error) { return 0, tc.wrap(&wrapsEOF{cyc}) }})
				if !errors.Is(err, io.EOF) || !errors.Is(err, cyc) || errors.Is(err, context.Canceled) {
					t.Errorf("errors.Is on the returned error: EOF %v, the cycle %v, Canceled %v", errors.Is(err, io.EOF), errors.Is(err, cyc), errors.Is(err, context.Canceled))
				}
				var w *wrapsEOF
				if !errors.As(err, &w) || w.next != cyc {
					t.Errorf("errors.As found %v", w)
				}
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				stop.Store(true)
				<-done
				t.Fatal("runtime.Do, or errors.Is on the error it returned, did not end in 15 s")
			}
		})
	}
}

// wrapsEOF wraps both io.EOF and next.
type wrapsEOF struct{ next error }

func (e *wrapsEOF) Error() string   { return "wraps EOF" }
func (e *wrapsEOF) Unwrap() []error { return []error{io.EOF, e.next} }

// TestUnmarkedPermanentIsFailed: an effect's error with no Permanent or
// Retryable mark that matches ErrPermanent (the sentinel wrapped; a nested
// call's FailedError returned as it is) is recorded FAILED under every
// error policy, as ErrPermanent's doc says and as DoTx records it (review
// r30 F1: runtime.Do left it to the policy); a Retryable mark over it wins.
func TestUnmarkedPermanentIsFailed(t *testing.T) {
	nested := &idem.FailedError{Operation: "inner", Key: "k", Message: "declined"}
	for _, tc := range []struct {
		name string
		err  error
		want idem.State
	}{
		{"sentinel wrapped", fmt.Errorf("card declined: %w", idem.ErrPermanent), idem.StateFailed},
		{"nested FailedError", nested, idem.StateFailed},
		{"nested FailedError wrapped", fmt.Errorf("outer: %w", nested), idem.StateFailed},
		{"retryable over it", idem.Retryable(fmt.Errorf("card declined: %w", idem.ErrPermanent)), ""},
	} {
		for _, policy := range []idem.ErrorPolicy{idem.RecordUnknown, idem.ReleaseRecord} {
			t.Run(fmt.Sprint(tc.name, "/", policy), func(t *testing.T) {
				st := memstore.New()
				rt, err := idem.New(st, idem.WithErrorPolicy(policy))
				if err != nil {
					t.Fatal(err)
				}
				if got := rt.Classify(tc.err); got != tc.want {
					t.Fatalf("Classify = %q, want %q", got, tc.want)
				}
				ctx := context.Background()
				id := idem.Identity{Operation: "unmarked.permanent", Key: "k"}
				_, err = idem.Do(ctx, rt, idem.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "r",
					Effect: func(ctx context.Context, req string) (int, error) { return 0, tc.err }})
				rec, gerr := st.Get(ctx, id)
				switch {
				case tc.want == idem.StateFailed && (gerr != nil || rec.State != idem.StateFailed):
					t.Fatalf("Do returned %v; record %s (%v), want FAILED", err, rec.State, gerr)
				case tc.want == "" && !errors.Is(gerr, idem.ErrNotFound):
					t.Fatalf("Do returned %v; record %s (%v), want released", err, rec.State, gerr)
				}
			})
		}
	}
}
