package sim

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestLateSuccessAnswer runs the simulation on a store that applies some
// SUCCESS writes and answers them only after the runtime's completion
// timeout (a server or a process stalled past it, as a CI run at load 12
// did once): the runtime cannot know the write was applied and returns the
// effect's response with ErrNotRecorded, as documented. That answer, to a
// write never answered in time, is not a breach; every other invariant
// still holds.
func TestLateSuccessAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := NewClock()
		lease := 2 * time.Second
		s := &lateSuccess{Store: memstore.New(memstore.WithClock(clock.Now)), delay: 5 * lease}
		q := &quietTB{TB: t}
		rep := Run(q, Config{Name: "late-success", Store: s, Seed: 11, Clock: clock, Requests: 120, Lease: lease, TTL: 20 * lease})
		if s.late.Load() == 0 {
			t.Fatalf("no SUCCESS write was answered late: %s", rep.Summary())
		}
		for _, v := range rep.Violations {
			t.Errorf("%s", v)
		}
		t.Logf("%d SUCCESS writes answered late; %s", s.late.Load(), rep.Summary())
	})
}

// lateSuccess applies every third SUCCESS write at once and answers it
// after delay (longer than the runtime's completion timeout).
type lateSuccess struct {
	runtime.Store
	delay time.Duration
	n     atomic.Int64
	late  atomic.Int64
}

func (s *lateSuccess) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	v, err := s.Store.Transition(ctx, p)
	if err == nil && p.To == runtime.StateSuccess && s.n.Add(1)%3 == 0 {
		s.late.Add(1)
		time.Sleep(s.delay)
	}
	return v, err
}

// TestStallExcused: a breach of "lease held at effect start" is excused
// only by a measured stall past the lease rule's margin, and never with
// NoStallExcuses.
func TestStallExcused(t *testing.T) {
	const lease = 500 * time.Millisecond
	v := []Violation{{Invariant: "lease held at effect start"}}
	for _, c := range []struct {
		stall     time.Duration
		noExcuses bool
		excused   bool
	}{
		{0, false, false},
		{49 * time.Millisecond, false, false},
		{50 * time.Millisecond, false, true},
		{time.Second, false, true},
		{time.Second, true, false},
	} {
		kept, excused := stallExcused(v, c.stall, lease, c.noExcuses)
		if got := len(excused) == 1 && len(kept) == 0; got != c.excused || len(kept)+len(excused) != 1 {
			t.Errorf("stall %v, noExcuses %v: kept %d, excused %d; want excused %v", c.stall, c.noExcuses, len(kept), len(excused), c.excused)
		}
	}
}

// TestModelResendAfterTakeover: a transition whose reply was lost, resent
// after another worker took the record over (its lease had ended), may be
// answered with the version it wrote (the Redis store keeps the last
// transition's token apart for that) or ErrLeaseLost; any other version,
// or a success for a token the record never had, is not linearizable. A
// CI run of the Redis Cluster simulation (load 17.6) recorded the first
// answer and the model, which forgot the token at the takeover, rejected
// it.
func TestModelResendAfterTakeover(t *testing.T) {
	const a, b, fp = "w-a", "w-b", "fp"
	steps := []struct {
		in  histIn
		out histOut
	}{
		{histIn{kind: opClaim, owner: a, fp: fp},
			histOut{claimed: true, rec: recView{found: true, st: runtime.StateProcessing, owner: a, version: 1, fp: fp, lease: 10, now: 1}}},
		{histIn{kind: opTransition, from: runtime.StateProcessing, owner: a, version: 1, to: runtime.StateProcessing, newOwner: a, lease: true, token: "t1"},
			histOut{v: 2}},
		{histIn{kind: opClaim, owner: b, fp: fp},
			histOut{claimed: true, rec: recView{found: true, st: runtime.StateProcessing, owner: b, version: 3, fp: fp, lease: 40, now: 30, takeovers: 1}}},
	}
	states := []mstate{{}}
	for i, st := range steps {
		var next []mstate
		for _, s := range states {
			next = append(next, modelStep(s, st.in, st.out)...)
		}
		if len(next) == 0 {
			t.Fatalf("step %d (%s) rejected", i, describeOp(st.in, st.out))
		}
		states = next
	}
	resend := histIn{kind: opTransition, from: runtime.StateProcessing, owner: a, version: 1, to: runtime.StateProcessing, newOwner: a, lease: true, token: "t1"}
	for _, tc := range []struct {
		name string
		in   histIn
		out  histOut
		ok   bool
	}{
		{"the version it wrote", resend, histOut{v: 2}, true},
		{"lease lost", resend, histOut{err: errLeaseLost}, true},
		{"the current version", resend, histOut{v: 3}, false},
		{"a new version", resend, histOut{v: 4}, false},
		{"another token", func() histIn { in := resend; in.token = "t9"; return in }(), histOut{v: 2}, false},
	} {
		got := 0
		for _, s := range states {
			got += len(modelStep(s, tc.in, tc.out))
		}
		if (got > 0) != tc.ok {
			t.Errorf("%s: %s accepted in %d states, want accepted %v", tc.name, describeOp(tc.in, tc.out), got, tc.ok)
		}
	}
}
