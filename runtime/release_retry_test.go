package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// firstReleaseLost fails the first Release with a transient error without
// applying it, after running between (another worker acting meanwhile).
type firstReleaseLost struct {
	runtime.Store
	mu      sync.Mutex
	calls   int
	between func()
}

func (s *firstReleaseLost) Release(ctx context.Context, p runtime.ReleaseParams) error {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if first {
		s.between()
		return errors.New("read tcp 127.0.0.1:6379: i/o timeout") // transient, not applied
	}
	return s.Store.Release(ctx, p)
}

// A release whose first try failed without being applied, and whose retry
// finds the record changed (another worker acquired it meanwhile), did not
// delete the record: it must not be reported released. The retry's "lease
// lost" used to count as the release done whenever an earlier try had
// failed: Resolve reported "released; it is deleted" for a record a
// reconciler held, and a reconciler counted a record it lost as released.
// A release found changed after a failed try now reads the record: gone,
// or another life of it, is released; the same life, changed, is not.
// Found by review r43.
func TestReleaseRetryAfterTakeoverIsNotReleased(t *testing.T) {
	for _, door := range []string{"resolve held-off UNKNOWN", "resolve expired PROCESSING", "reconciler"} {
		t.Run(door, func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				ctx := context.Background()
				clk := &resolveClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
				ms := memstore.New(memstore.WithClock(clk.now))
				id := runtime.Identity{Scope: "release-retry", Operation: "Retry.Op", Key: "k1"}
				cr, err := ms.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte(`1`), Owner: "w1", Lease: time.Minute})
				if err != nil || !cr.Claimed {
					t.Fatal(cr, err)
				}
				if door != "resolve expired PROCESSING" {
					if _, err := ms.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1",
						Version: cr.Record.Version, To: runtime.StateUnknown, Lease: 10 * time.Second}); err != nil {
						t.Fatal(err)
					}
				} else {
					clk.add(2 * time.Minute) // w1 died: its lease expired
				}
				if door == "reconciler" {
					clk.add(time.Minute) // the hold-off ends
				}
				var acquired []runtime.Record
				st := &firstReleaseLost{Store: ms, between: func() {
					clk.add(2 * time.Hour) // every lease runs out
					var err error
					acquired, err = ms.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler-2", Lease: time.Hour, Limit: 10})
					if err != nil {
						t.Error(err)
					}
				}}
				switch door {
				case "reconciler":
					rt, err := runtime.New(st)
					if err != nil {
						t.Fatal(err)
					}
					if err := runtime.Register(rt, id.Operation, func(context.Context, int) (int, runtime.Outcome, error) {
						return 0, runtime.OutcomeNotHappened, nil
					}, runtime.QueryOptions{}); err != nil {
						t.Fatal(err)
					}
					rc, err := runtime.NewReconciler(rt)
					if err != nil {
						t.Fatal(err)
					}
					s, err := rc.RunOnce(runtime.WithScope(ctx, id.Scope))
					if err != nil || s.Released != 0 || s.LeaseLost != 1 {
						t.Errorf("pass: %+v, %v; want the record counted lost, not released", s, err)
					}
				default:
					res, err := runtime.Resolve(ctx, st, runtime.Resolution{ID: id, To: runtime.ResolveReleased, Reason: "test", Owner: "idemctl:test"})
					if !errors.Is(err, runtime.ErrNotResolvable) {
						t.Errorf("Resolve: %+v, %v; want ErrNotResolvable (another worker holds the record)", res, err)
					}
				}
				if len(acquired) != 1 {
					t.Fatalf("setup: the other worker acquired %d records, want 1", len(acquired))
				}
				rec, err := ms.Get(ctx, id)
				if err != nil || rec.Owner != "reconciler-2" {
					t.Fatalf("record %+v, %v; want it held by the worker that acquired it", rec, err)
				}
			})
		})
	}
}
