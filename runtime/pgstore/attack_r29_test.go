package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type r29Req struct{ Ref string }

// Classification across doors. Retryable's doc: "the record is released
// and a retry runs the effect again"; Classify (the one place that
// decides, for Do, the adapters and generated wrappers) takes the first
// mark in the tree, so Retryable(fmt.Errorf("...: %w", Permanent(x)))
// releases under runtime.Do. DoTx asks errors.Is(err, ErrPermanent), which
// finds the inner mark through the outer Retryable: it records FAILED and
// a retry replays the failure instead of running the effect again.
// Schedule: one DoTx whose effect returns such an error (its writes
// rolled back), then a retry with the same key whose effect would succeed.
func TestR29DoTxRetryableOverPermanentRecordedFailed(t *testing.T) {
	cases := map[string]func() error{
		"wrapped": func() error {
			return runtime.Retryable(fmt.Errorf("card service not reached: %w", runtime.Permanent(errors.New("declined"))))
		},
		"joined": func() error {
			return errors.Join(runtime.Retryable(errors.New("not sent")), runtime.Permanent(errors.New("declined")))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			p := r28Pool(t, 4)
			st := pgstore.New(p)
			rt, err := runtime.New(st)
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r29")
			if got := rt.Classify(mk()); got != "" {
				t.Fatalf("Classify says %q; this test assumes it releases", got)
			}
			_, derr := runtime.Do(ctx, rt, runtime.Call[r29Req, int64]{Operation: "r29.retperm.do", Key: "k", Request: r29Req{"a"},
				Effect: func(context.Context, r29Req) (int64, error) { return 0, mk() }})
			_, gerr := st.Get(ctx, runtime.Identity{Scope: "r29", Operation: "r29.retperm.do", Key: "k"})
			t.Logf("runtime.Do: %v; record after: %v (released: ErrNotFound)", derr, gerr)

			var runs atomic.Int32
			call := pgstore.TxCall[r29Req, int64]{Operation: "r29.retperm", Key: "k", Request: r29Req{"a"},
				Effect: func(ctx context.Context, tx pgx.Tx, r r29Req) (int64, error) {
					if runs.Add(1) == 1 {
						return 0, mk()
					}
					return 7, nil
				}}
			var last error
			for i := 0; i < 2; i++ {
				tx, err := p.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				v, err := pgstore.DoTx(ctx, rt, tx, call)
				cerr := tx.Commit(ctx)
				rec, gerr := st.Get(ctx, runtime.Identity{Scope: "r29", Operation: "r29.retperm", Key: "k"})
				t.Logf("DoTx %d: %d, %v (commit %v); record %s %v; effect runs %d", i+1, v, err, cerr, rec.State, gerr, runs.Load())
				last = err
			}
			if !errors.Is(gerr, runtime.ErrNotFound) {
				t.Fatalf("runtime.Do kept a record: %v", gerr)
			}
			if runs.Load() != 2 {
				t.Fatalf("DoTx recorded FAILED for an error Classify releases (marked Retryable outside its Permanent): the retry replayed %v instead of running the effect again (runs %d), while runtime.Do released the same error", last, runs.Load())
			}
		})
	}
}
