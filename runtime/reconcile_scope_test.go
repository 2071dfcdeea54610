package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

// TestReconcilerQuerySeesTheHandlersScope: a query registered with
// runtime.Register and run by the reconciler gets the scope the handler's
// context had (short, or as long as an identity allows), in ScopeFrom and
// in AttemptFrom: a multi-tenant downstream looks the charge up in that
// tenant, and a query that looked elsewhere would say "not happened" and
// let the effect run twice. On every store.
func TestReconcilerQuerySeesTheHandlersScope(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		for _, scope := range []string{"tenant-a", "tenant-" + strings.Repeat("long", 62)} {
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			op := "Scope.Query." + teststores.Unique()
			ctx := runtime.WithScope(context.Background(), scope)
			_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: op, Key: "k", Request: "r",
				Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
			if !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
			}
			var mu sync.Mutex
			var seen, attempt string
			if err := runtime.Register(rt, op, func(ctx context.Context, _ string) (string, runtime.Outcome, error) {
				mu.Lock()
				defer mu.Unlock()
				seen = runtime.ScopeFrom(ctx)
				if a, ok := runtime.AttemptFrom(ctx); ok {
					attempt = a.ID.Scope
				}
				return "receipt", runtime.OutcomeSucceeded, nil
			}, runtime.QueryOptions{}); err != nil {
				t.Fatal(err)
			}
			r, err := runtime.NewReconciler(rt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.RunOnce(context.Background()); err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			mu.Lock()
			if seen != scope || attempt != scope {
				t.Errorf("scope %.20q…: the query saw ScopeFrom %.20q…, AttemptFrom %.20q…", scope, seen, attempt)
			}
			mu.Unlock()
		}
	})
}
