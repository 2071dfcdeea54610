package sim

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// quietTB collects a run's failures instead of failing the test, so that a
// test can check which invariants broke.
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

func count(rep Report, invariant string) int {
	n := 0
	for _, v := range rep.Violations {
		if v.Invariant == invariant {
			n++
		}
	}
	return n
}

// TestModelAcceptsReferenceStore runs the simulation on a correct store
// (memstore: store-wide versions, recognised retries): its histories must
// be linearizable against the model, whatever the runtime's own bugs.
func TestModelAcceptsReferenceStore(t *testing.T) {
	for seed := range uint64(10) {
		seed++
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := NewClock()
				q := &quietTB{TB: t}
				rep := Run(q, Config{Name: "ref", Store: memstore.New(memstore.WithClock(clock.Now)), Seed: seed, Clock: clock,
					Requests: 200, Lease: 2 * time.Second, EnforceRecordLimit: true})
				if rep.Checked < 20 {
					t.Errorf("only %d identities checked", rep.Checked)
				}
				if n := count(rep, "linearizability"); n > 0 {
					for _, v := range rep.Violations {
						if v.Invariant == "linearizability" {
							t.Errorf("seed %d: %s", seed, v)
							break
						}
					}
				}
			})
		})
	}
}

// TestCatchesBrokenTakeover runs the simulation on a store that takes over
// live leases: the run must report non-linearizable histories and double
// effects.
func TestCatchesBrokenTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := NewClock()
		s := brokenTakeover{memstore.New(memstore.WithClock(clock.Now))}
		q := &quietTB{TB: t}
		rep := Run(q, Config{Name: "broken", Store: s, Seed: 7, Clock: clock, Requests: 200, Lease: 2 * time.Second})
		if count(rep, "linearizability") == 0 {
			t.Errorf("a store that takes over live leases passed the linearizability check: %s", rep.Summary())
		}
		if len(q.errs) == 0 {
			t.Error("the run did not fail its test")
		}
	})
}

// brokenTakeover is a store bug the simulation must catch: a claim that
// finds a PROCESSING record of the same fingerprint with a live lease takes
// it over anyway (by a compare-and-set on the live owner's version).
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
