package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// A query that returns an error says it could not tell, whatever outcome
// it returns beside it (Go's rule: with an error, the other results are not
// the answer), except OutcomeFailed, whose error is the failure. A query
// that answered (zero, OutcomeNotHappened, err) on a lookup that failed
// made a duplicate run the effect again, and the reconciler release the
// record for the client's retry to run it: a charge made twice when the
// lookup's error hid it.
func TestQueryErrorCannotTell(t *testing.T) {
	lookupErr := errors.New("lookup failed: connection reset")
	for _, o := range []runtime.Outcome{runtime.OutcomeNotHappened, runtime.OutcomeSucceeded, runtime.OutcomeUnknown, runtime.Outcome(9)} {
		query := func(context.Context, string) (int, runtime.Outcome, error) { return 7, o, lookupErr }
		for _, door := range []string{"duplicate", "reconciler"} {
			t.Run(o.String()+"/"+door, func(t *testing.T) {
				st := memstore.New()
				rt, err := runtime.New(st)
				if err != nil {
					t.Fatal(err)
				}
				const op, key = "query.error", "k"
				var ran atomic.Int32
				effect := func(context.Context, string) (int, error) { ran.Add(1); return 1, nil }
				r24unknown(t, rt, op, key)
				switch door {
				case "duplicate":
					_, err := runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: op, Key: key, Request: key,
						Effect: effect, Query: query})
					if !errors.Is(err, runtime.ErrOutcomeUnknown) {
						t.Errorf("duplicate: %v, want ErrOutcomeUnknown", err)
					}
				case "reconciler":
					if err := runtime.Register(rt, op, query, runtime.QueryOptions{}); err != nil {
						t.Fatal(err)
					}
					rc, err := runtime.NewReconciler(rt)
					if err != nil {
						t.Fatal(err)
					}
					s, err := rc.RunOnce(context.Background())
					if err != nil || s.StillUnknown != 1 {
						t.Errorf("pass: %+v, %v; want the record still unknown", s, err)
					}
				}
				if n := ran.Load(); n != 0 {
					t.Errorf("the effect ran again %d times", n)
				}
				rec, err := st.Get(context.Background(), runtime.Identity{Operation: op, Key: key})
				if err != nil || rec.State != runtime.StateUnknown {
					t.Fatalf("record %+v, %v; want UNKNOWN", rec, err)
				}
			})
		}
	}
}
