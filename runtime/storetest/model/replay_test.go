package model

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// replayConfigs are the models whose random walks are replayed: store
// operations of every actor, with every fault, over two lives, the sweeper
// running in every state.
var replayConfigs = []Config{
	{Workers: 3, Query: true, Reconciler: true, Sweeper: true, SweepAlways: true, Operator: true, MaxAttempts: 2, Crashes: 2, LostReplies: 3, QueryErrors: 3, Lives: 2},
	{Workers: 2, Query: false, SharedOwner: true, NotHappenedFail: true, Reconciler: true, Sweeper: true, SweepAlways: true, Operator: true, Crashes: 2, LostReplies: 3, Lives: 2},
	{Workers: 2, Query: true, Network: true, Reconciler: true, Sweeper: true, SweepAlways: true, MaxAttempts: 2, Crashes: 1, LostReplies: 2, QueryErrors: 2, Lives: 2},
}

// replayAll replays walks of every replay configuration against a store.
// A walk on the real clock that ran late is replayed again (up to 8
// times), with ticks twice as long each time up to 3.2 s (open gets the
// try's number): on a machine so loaded that a step takes half a 400 ms
// tick, the store's clock cannot be compared with the model's at that
// resolution, and a coarser one compares the same results. The late steps
// come in bursts (a CI run at load 20 saw four tries in a row late, the
// last with 3.2 s ticks, 19 s in all): past 3.2 s, another try at the same
// tick outlasts a burst where a longer tick would only make the walk long.
func replayAll(t *testing.T, name string, walks, steps int, open func(t *testing.T, try int) ReplayConfig) {
	ops, late := 0, 0
	for ci, c := range replayConfigs {
		for w := range walks {
			seed := uint64(ci*1000 + w)
			trace := Walk(c, seed, steps)
			var err error
			for try := 0; try < 8; try++ {
				rc := open(t, try)
				rc.ID = runtime.Identity{Scope: "model", Operation: fmt.Sprintf("Model.%s.%d.%d.%d", name, ci, seed, time.Now().UnixNano()), Key: "k"}
				if err = Replay(context.Background(), rc, trace); !errors.Is(err, ErrInconclusive) {
					break
				}
				late++
			}
			if err != nil {
				t.Fatalf("config %d (%s), walk seed %d: %v (%d late replays)\ntrace:\n%s", ci, c, seed, err, late, formatTrace(trace))
			}
			for _, s := range trace {
				if s.Step.Op.Kind != OpNone {
					ops++
				}
			}
		}
	}
	t.Logf("%s: %d store operations replayed, each result and the record after it matching the model (%d replays ran late and were repeated)", name, ops, late)
}

func formatTrace(trace []TraceStep) string {
	v := Violation{Trace: trace}
	return v.Format(Config{})
}

// TestReplayMemstore replays random model walks against memstore on a
// fake clock: every store result must be the model's.
func TestReplayMemstore(t *testing.T) {
	walks := 200
	if testing.Short() {
		walks = 40
	}
	replayAll(t, "memstore", walks, 120, func(t *testing.T, _ int) ReplayConfig {
		var mu sync.Mutex
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		return ReplayConfig{
			Store: memstore.New(memstore.WithClock(clock)), Tick: time.Second,
			Advance: func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() },
		}
	})
}

// realTick is a tick on a store with its own clock: long enough that the
// operations between two ticks take under half of it on a machine with
// spare CPU (each retry of a late walk doubles it).
const realTick = 400 * time.Millisecond

// realClock ticks on a schedule (tick k at start + k ticks), so that sleeps
// that overshoot do not add up, and says when a step runs late.
type realClock struct {
	tick time.Duration
	next time.Time
}

func newRealClock(tick time.Duration) *realClock { return &realClock{tick: tick, next: time.Now()} }

func (c *realClock) advance() {
	c.next = c.next.Add(c.tick)
	time.Sleep(time.Until(c.next))
}

func (c *realClock) late() bool { return time.Since(c.next) > c.tick/2-c.tick/10 }

func realReplay(store runtime.Store) func(t *testing.T, try int) ReplayConfig {
	return func(t *testing.T, try int) ReplayConfig {
		c := newRealClock(realTick << min(try, 3))
		return ReplayConfig{Store: store, Tick: c.tick, Advance: c.advance, Late: c.late, SweepShared: true}
	}
}

// TestReplayStores replays walks against PostgreSQL, Redis and Redis
// Cluster on their own clocks (skipped locally without the servers, as
// internal/testenv says).
func TestReplayStores(t *testing.T) {
	for _, st := range teststores.All()[1:] {
		t.Run(st.Name, func(t *testing.T) {
			replayAll(t, st.Name, 1, 60, realReplay(st.New(t)))
		})
	}
}

// TestReplayDetectsDivergence: a model whose store guard is broken
// diverges from memstore, and the replay says where. Without this, a
// replay that compared nothing would pass too.
func TestReplayDetectsDivergence(t *testing.T) {
	for _, m := range []Mutation{MutClaimIgnoresLease, MutAcquireIgnoresLease, MutTransitionNoVersion, MutRenewNoCAS, MutTokenSurvivesWrites} {
		t.Run(m.String(), func(t *testing.T) {
			for ci, c := range replayConfigs {
				c.Mutation = m
				c.SharedOwner = true // same owner everywhere: the version guards matter
				for seed := range uint64(300) {
					trace := Walk(c, seed, 120)
					var mu sync.Mutex
					now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
					rc := ReplayConfig{
						Store: memstore.New(memstore.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })),
						ID:    runtime.Identity{Operation: "Model.Divergence", Key: "k"}, Tick: time.Second,
						Advance: func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() },
					}
					if err := Replay(context.Background(), rc, trace); err != nil {
						t.Logf("config %d, seed %d: %v", ci, seed, err)
						return
					}
				}
			}
			t.Fatalf("no walk of the model with %s diverged from memstore", m)
		})
	}
}

// sweepsLive is a store whose Sweep, besides what it should delete, also
// deletes the record of id while it is PROCESSING or UNKNOWN (deleteFinal:
// also SUCCESS and FAILED before their TTL): the mistake of a sweep whose
// filter forgot the state, or the expiry.
type sweepsLive struct {
	runtime.Store
	id          runtime.Identity
	deleteFinal bool
}

func (s *sweepsLive) Sweep(ctx context.Context, limit int) (int, error) {
	n, err := s.Store.Sweep(ctx, limit)
	if err != nil {
		return n, err
	}
	rec, err := s.Store.Get(ctx, s.id)
	if errors.Is(err, runtime.ErrNotFound) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	if !s.deleteFinal && rec.State.Final() {
		return n, nil
	}
	// A release for the record as it is: the store's own delete. The
	// count stays as it was, so that only the record read back can tell.
	return n, s.Store.Release(ctx, runtime.ReleaseParams{ID: s.id, State: rec.State, Owner: rec.Owner, Version: rec.Version})
}

// TestReplayCatchesSweepOfLiveRecords: a store whose Sweep deletes records
// it must spare diverges from the model in a replayed walk, because walks
// sweep in every state (SweepAlways).
func TestReplayCatchesSweepOfLiveRecords(t *testing.T) {
	for _, deleteFinal := range []bool{false, true} {
		t.Run(fmt.Sprintf("deleteFinal=%v", deleteFinal), func(t *testing.T) {
			for ci, c := range replayConfigs {
				for seed := range uint64(50) {
					trace := Walk(c, seed, 120)
					var mu sync.Mutex
					now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
					id := runtime.Identity{Operation: "Model.SweepsLive", Key: "k"}
					rc := ReplayConfig{
						Store: &sweepsLive{Store: memstore.New(memstore.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })),
							id: id, deleteFinal: deleteFinal},
						ID: id, Tick: time.Second,
						Advance: func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() },
					}
					if err := Replay(context.Background(), rc, trace); err != nil {
						t.Logf("config %d, seed %d: %v", ci, seed, err)
						return
					}
				}
			}
			t.Fatal("no walk caught a store whose Sweep deletes records it must spare")
		})
	}
}
