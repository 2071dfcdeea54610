package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// failingTransitions is a memory store whose completions fail.
type failingTransitions struct{ *memstore.Store }

func (failingTransitions) Transition(context.Context, runtime.TransitionParams) (int64, error) {
	return 0, errors.New("store unreachable")
}

// TestAbandonLogSaysWhatHappened: a call that leaves before its outcome is
// recorded (its effect calls runtime.Goexit) logs whether UNKNOWN was
// recorded, and the store's error only when it was not.
func TestAbandonLogSaysWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store runtime.Store
		want  string
		err   bool
	}{
		{"recorded", memstore.New(), "; recorded UNKNOWN", false},
		{"store fails", failingTransitions{memstore.New()}, "recording UNKNOWN failed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			rt, err := runtime.New(tc.store, runtime.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				runtime.WithCompletionTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			call := runtime.Call[string, string]{Operation: "T.Abandon", Key: "k", Request: "r",
				Effect: func(context.Context, string) (string, error) { goruntime.Goexit(); return "", nil }}
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = runtime.Do(context.Background(), rt, call)
			}()
			<-done
			var line string
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, "before its outcome was recorded") {
					line = l
				}
			}
			if !strings.Contains(line, tc.want) {
				t.Fatalf("log %q, want a line with %q; all logs:\n%s", line, tc.want, logs.String())
			}
			if got := strings.Contains(line, " err="); got != tc.err {
				t.Errorf("log %q: has err=: %v, want %v", line, got, tc.err)
			}
		})
	}
}
