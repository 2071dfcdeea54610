package redisstore_test

// Adversarial review 19 of read-first claims: a replay is answered from a
// pipelined HGETALL + TIME, without the claim script. Seeded workers race
// claims (always reading first) against transitions, releases, lease
// expiries of a few milliseconds, TTLs that Redis itself enforces (expiry
// grace 0), sweeps and reconciler acquisitions, on four identities.
// Every answer is checked:
//
//   - an unclaimed answer is a record the claim script would have left
//     alone at the answer's StoreNow (a finished record before its
//     ExpiresAt, a PROCESSING lease live or another request's, an UNKNOWN
//     record not acquirable by this call);
//   - it is not older than a write of the same identity that completed
//     before the claim began (versions only grow per identity);
//   - it is a (version, state, owner) some writer wrote;
//   - no version is handed to two claimers or acquirers.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redistest"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

type r19Write struct {
	st    runtime.State
	owner string
}

type r19Version struct {
	id int // index of the identity
	v  int64
}

type r19Answer struct {
	rec     runtime.Record
	claimed bool
	floor   int64 // the highest version of a write of the identity completed before the claim began
	fp      []byte
	acquire bool
}

func TestReview19ReadFirstRaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return standaloneClient(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					r19Race(t, newStore(t, tc.client(t), redisstore.WithPrefix(testPrefix(t)), redisstore.WithExpiryGrace(0), redisstore.WithBuckets(2)), seed, nil)
				})
			}
		})
	}
}

// r19Race runs the workers on s for 2 s, with bg (when not nil) running
// beside them until the same deadline; with bg, Redis errors (TRYAGAIN past
// go-redis's retries while a slot migrates) are counted, not failures:
// they fail closed.
func r19Race(t *testing.T, s *redisstore.Store, seed uint64, bg func(deadline time.Time)) {
	ctx := context.Background()
	redisstore.SetClaimOrder(s, 1) // always read first
	var redisErrs atomic.Int64
	ids := make([]runtime.Identity, 4)
	for i := range ids {
		ids[i] = runtime.Identity{Scope: "r19", Operation: "R19.Race", Key: fmt.Sprint("k", i)}
	}
	var (
		mu      sync.Mutex
		writes  = map[r19Version]r19Write{} // what wrote each version of each identity (versions are per bucket)
		granted = map[r19Version]string{}   // who was granted it
		answers []r19Answer
		floors  = make([]atomic.Int64, len(ids))
		errs    []string
	)
	fail := func(format string, args ...any) {
		if bg != nil {
			if redisErrs.Add(1) <= 5 {
				t.Logf("fails closed: "+format, args...)
			}
			return
		}
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	wrote := func(i int, v int64, st runtime.State, owner string) {
		mu.Lock()
		writes[r19Version{i, v}] = r19Write{st, owner}
		mu.Unlock()
		for {
			f := floors[i].Load()
			if v <= f || floors[i].CompareAndSwap(f, v) {
				return
			}
		}
	}
	grant := func(i int, v int64, who string) {
		mu.Lock()
		defer mu.Unlock()
		if other, ok := granted[r19Version{i, v}]; ok {
			errs = append(errs, fmt.Sprintf("%v version %d granted to %s and to %s", ids[i], v, other, who))
		}
		granted[r19Version{i, v}] = who
	}
	idx := func(id runtime.Identity) int {
		for i := range ids {
			if ids[i] == id {
				return i
			}
		}
		return -1
	}
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	if bg != nil {
		wg.Add(1)
		go func() { defer wg.Done(); bg(deadline) }()
	}
	ms := func(rng *rand.Rand) time.Duration { return time.Duration(1+rng.IntN(15)) * time.Millisecond }
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for n := 0; time.Now().Before(deadline); n++ {
				i := rng.IntN(len(ids))
				owner := fmt.Sprintf("w%d.%d", w, n)
				p := runtime.ClaimParams{ID: ids[i], Fingerprint: []byte{byte('a' + rng.IntN(2))}, Request: []byte("rq"),
					Owner: owner, Lease: ms(rng), AcquireUnknown: rng.IntN(2) == 0}
				floor := floors[i].Load()
				res, err := s.Claim(ctx, p)
				if err != nil {
					fail("claim: %v", err)
					if bg == nil {
						return
					}
					continue
				}
				mu.Lock()
				answers = append(answers, r19Answer{rec: res.Record, claimed: res.Claimed, floor: floor, fp: p.Fingerprint, acquire: p.AcquireUnknown})
				mu.Unlock()
				if !res.Claimed {
					continue
				}
				rec := res.Record
				wrote(i, rec.Version, rec.State, rec.Owner)
				grant(i, rec.Version, owner)
				tp := runtime.TransitionParams{ID: rec.ID, From: rec.State, Owner: rec.Owner, Version: rec.Version, NewOwner: owner,
					Response: []byte("rs"), TTL: ms(rng)}
				switch k := rng.IntN(6); k {
				case 0, 1:
					tp.To = runtime.StateSuccess
				case 2:
					tp.To = runtime.StateFailed
				case 3:
					tp.To, tp.Lease = runtime.StateUnknown, ms(rng)
				case 4:
					if err := s.Release(ctx, runtime.ReleaseParams{ID: rec.ID, State: rec.State, Owner: rec.Owner, Version: rec.Version}); err != nil && err != runtime.ErrLeaseLost {
						fail("release: %v", err)
					}
					continue
				default:
					continue // the lease runs out
				}
				if rng.IntN(3) == 0 {
					time.Sleep(ms(rng)) // the lease may expire first
				}
				v, err := s.Transition(ctx, tp)
				switch {
				case err == nil:
					wrote(i, v, tp.To, tp.NewOwner)
				case err != runtime.ErrLeaseLost:
					fail("transition: %v", err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the reconciler and the sweeper
		defer wg.Done()
		for n := 0; time.Now().Before(deadline); n++ {
			owner := fmt.Sprint("rc", n)
			recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: owner, Lease: 5 * time.Millisecond, Limit: 2})
			if err != nil {
				fail("acquire: %v", err)
				if bg == nil {
					return
				}
			}
			for _, r := range recs {
				wrote(idx(r.ID), r.Version, r.State, r.Owner)
				grant(idx(r.ID), r.Version, owner)
			}
			if _, err := s.Sweep(ctx, 0); err != nil {
				fail("sweep: %v", err)
				if bg == nil {
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
	var replays int
	for _, a := range answers {
		r := a.rec
		now := r.StoreNow
		w, ok := writes[r19Version{idx(r.ID), r.Version}]
		switch {
		case !ok:
			t.Errorf("answer %+v: version %d was never written", r, r.Version)
			continue
		case w.st != r.State && !(a.claimed && r.State == runtime.StateProcessing) || w.owner != r.Owner:
			t.Errorf("answer version %d %s/%s, but that version was written %s/%s", r.Version, r.State, r.Owner, w.st, w.owner)
		case r.Version < a.floor:
			t.Errorf("answer version %d (%s) is older than version %d, written before the claim began", r.Version, r.State, a.floor)
		}
		if a.claimed {
			continue
		}
		replays++
		sameFP := bytes.Equal(r.Fingerprint, a.fp)
		switch r.State {
		case runtime.StateSuccess, runtime.StateFailed:
			if !r.ExpiresAt.After(now) {
				t.Errorf("answered %s version %d past its ExpiresAt %v (store now %v)", r.State, r.Version, r.ExpiresAt, now)
			}
		case runtime.StateProcessing:
			if !r.LeaseExpiresAt.IsZero() && !r.LeaseExpiresAt.After(now) && sameFP {
				t.Errorf("answered PROCESSING version %d unclaimed with its lease expired at %v (store now %v)", r.Version, r.LeaseExpiresAt, now)
			}
		case runtime.StateUnknown:
			if a.acquire && !r.LeaseExpiresAt.After(now) && sameFP {
				t.Errorf("answered UNKNOWN version %d unclaimed to an acquiring claim, lease free since %v (store now %v)", r.Version, r.LeaseExpiresAt, now)
			}
		default:
			t.Errorf("answered a record in state %q", r.State)
		}
	}
	t.Logf("%d claims, %d unclaimed answers, %d versions written, %d Redis errors", len(answers), replays, len(writes), redisErrs.Load())
}

// TestReview19ReadFirstReshard: the same race on a cluster of its own while
// the slot of the store's one bucket moves between two masters key by key,
// back and forth: reads that meet MOVED or ASK go to the script, and reads
// that the source still answers are the record's.
func TestReview19ReadFirstReshard(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := cl.NewClient(&redis.ClusterOptions{PoolSize: 16, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 4 * time.Millisecond, MaxRedirects: 16})
	ctx := context.Background()
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithExpiryGrace(0), redisstore.WithBuckets(1))
			_, pendKey, _ := redisstore.KeysOf(s, runtime.Identity{Scope: "r19", Operation: "R19.Race", Key: "k0"})
			slot, err := cl.KeySlot(ctx, pendKey)
			if err != nil {
				t.Fatal(err)
			}
			masters, err := cl.Masters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			moves := 0
			r19Race(t, s, seed, func(deadline time.Time) {
				for time.Now().Before(deadline) {
					from, err := cl.MasterOf(ctx, slot)
					if err != nil {
						t.Errorf("migration: %v", err)
						return
					}
					to := masters[0]
					if to == from {
						to = masters[1]
					}
					m, err := cl.BeginMigration(ctx, slot, to)
					if err != nil {
						t.Errorf("migration: %v", err)
						return
					}
					for {
						keys, err := m.Keys(ctx, 1)
						if err != nil || len(keys) == 0 {
							break
						}
						if err := m.Move(ctx, keys...); err != nil {
							t.Logf("move: %v", err)
						}
						time.Sleep(3 * time.Millisecond)
					}
					if err := m.Finish(ctx); err != nil {
						t.Errorf("migration: %v", err)
						return
					}
					moves++
					time.Sleep(20 * time.Millisecond)
				}
			})
			t.Logf("%d migrations of slot %d", moves, slot)
			// No script stopped halfway: every record well formed and indexed
			// as its state says.
			if err := cl.WaitHealthy(ctx, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if n, err := redisstore.CheckIndexes(ctx, s); err != nil {
				t.Errorf("after the migrations (%d records): %v", n, err)
			}
		})
	}
}
