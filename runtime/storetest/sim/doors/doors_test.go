package doors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// quietTB collects a run's failures instead of failing the test.
type quietTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (q *quietTB) Errorf(format string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.errs = append(q.errs, fmt.Sprintf(format, args...))
}

func (q *quietTB) Error(args ...any) { q.Errorf("%s", fmt.Sprint(args...)) }

// brokenTakeover is a store bug the doors must catch: a claim that finds a
// live PROCESSING record of the same fingerprint takes it over anyway.
type brokenTakeover struct{ runtime.Store }

func (s brokenTakeover) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	r := res.Record
	if err != nil || res.Claimed || r.State != runtime.StateProcessing || !r.LeaseLive() || !bytes.Equal(r.Fingerprint, p.Fingerprint) {
		return res, err
	}
	v, err := s.Transition(ctx, runtime.TransitionParams{ID: p.ID, From: r.State, Owner: r.Owner, Version: r.Version,
		To: runtime.StateProcessing, NewOwner: p.Owner, Lease: p.Lease})
	if err != nil {
		return res, nil
	}
	r.Owner, r.Version, r.LeaseExpiresAt = p.Owner, v, r.StoreNow.Add(p.Lease)
	return runtime.ClaimResult{Claimed: true, Record: r}, nil
}

// TestCatchesDoubleEffects runs the Do door on a store that takes over
// live leases: concurrent duplicates both run the effect, and the run must
// report it and fail its test.
func TestCatchesDoubleEffects(t *testing.T) {
	// Whether a schedule overlaps two owners depends on the seed: the first
	// seeds are tried in turn until one does.
	for seed := uint64(1); seed <= 12; seed++ {
		q := &quietTB{TB: t}
		rep := Run(q, DoorDo, Config{Name: "broken", Store: brokenTakeover{memstore.New()}, Seed: seed, EnforceRecordLimit: true})
		for _, v := range rep.Violations {
			if v.Invariant == "at-most-once" {
				if len(q.errs) == 0 {
					t.Error("the run reported a violation but did not fail its test")
				}
				t.Logf("seed %d: %s", seed, v)
				return
			}
		}
	}
	t.Error("a store that takes over live leases passed at-most-once on seeds 1 to 12")
}

// TestClassifyRuntime: what runtime.Do returns maps to the answer a client
// acts on.
func TestClassifyRuntime(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want kind
	}{
		{"success", context.Background(), nil, ansSuccess},
		{"not replayable", context.Background(), fmt.Errorf("x: %w", runtime.ErrNotReplayable), ansNotStored},
		{"key reused", context.Background(), runtime.ErrKeyReused, ansKeyReused},
		{"permanent", context.Background(), runtime.Permanent(errors.New("declined")), ansFailed},
		{"failed record", context.Background(), &runtime.FailedError{Message: "declined"}, ansFailed},
		{"in progress", context.Background(), runtime.ErrInProgress, ansLater},
		{"outcome unknown", context.Background(), runtime.ErrOutcomeUnknown, ansLater},
		{"lease lost", context.Background(), runtime.ErrLeaseLost, ansLater},
		{"caller's own deadline", done, fmt.Errorf("waiting: %w", context.Canceled), ansDeadline},
		{"handler timeout", context.Background(), wrappedErr(1), ansLater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyRuntime(tc.ctx, simpay.Receipt{}, tc.err).kind; got != tc.want {
				t.Errorf("classifyRuntime(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}
