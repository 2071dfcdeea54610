package sim

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
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
// (memstore with store-wide versions): its histories must be linearizable
// against the model, whatever the runtime's own bugs.
func TestModelAcceptsReferenceStore(t *testing.T) {
	for seed := range uint64(10) {
		seed++
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clock := NewClock()
				q := &quietTB{TB: t}
				rep := Run(q, Config{Name: "ref", Store: newRefStore(clock.Now), Seed: seed, Clock: clock,
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
		s := newRefStore(clock.Now)
		s.brokenTakeover = true
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
