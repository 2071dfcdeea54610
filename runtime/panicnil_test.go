package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestPanicNilIsAPanic: an effect that panics with nil under
// GODEBUG=panicnil=1 panicked, as any other: its record is UNKNOWN, never
// SUCCESS with the zero response (a recover that reads nil as "no panic"
// took it for a return).
func TestPanicNilIsAPanic(t *testing.T) {
	testenv.SetPanicNil(t)
	for _, recoverPanics := range []bool{true, false} {
		s := memstore.New()
		rt, err := runtime.New(s, runtime.WithRecoverPanics(recoverPanics))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		call := runtime.Call[string, int]{Operation: "T.PanicNil", Key: "k", Request: "r",
			Effect: func(context.Context, string) (int, error) { panic(nil) }}
		var derr error
		how, _ := r22Run(func() { _, derr = runtime.Do(ctx, rt, call) })
		rec, gerr := s.Get(ctx, runtime.Identity{Operation: "T.PanicNil", Key: "k"})
		if gerr != nil || rec.State != runtime.StateUnknown {
			t.Errorf("WithRecoverPanics(%v): record %s %q (%v); want UNKNOWN", recoverPanics, rec.State, rec.Response, gerr)
		}
		var pe *runtime.PanicError
		switch {
		case recoverPanics && (how != "returned" || !errors.Is(derr, runtime.ErrOutcomeUnknown) || !errors.As(derr, &pe)):
			t.Errorf("WithRecoverPanics(true): Do %s with %v; want ErrOutcomeUnknown with a PanicError", how, derr)
		case !recoverPanics && how == "returned" && derr == nil:
			t.Errorf("WithRecoverPanics(false): Do returned no error for an effect that panicked")
		}
	}
}
