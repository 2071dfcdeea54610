package redisstore_test

// Review r23: F2 and F4 of REVIEW.md on Redis and Redis Cluster.

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

func r23Run(f func()) string {
	done := make(chan string)
	go func() {
		returned := false
		defer func() {
			how := "goexit"
			if returned {
				how = "returned"
			} else if recover() != nil {
				how = "panicked"
			}
			done <- how
		}()
		f()
		returned = true
	}()
	return <-done
}

func r23Clients(t *testing.T) map[string]redis.UniversalClient {
	return map[string]redis.UniversalClient{"standalone": standaloneClient(t), "cluster": clusterClient(t)}
}

// TestR23RedisGoexitOnClaimed: F4 (observer Goexit on EventClaimed leaves
// the record PROCESSING with a live lease held by the gone call).
func TestR23RedisGoexitOnClaimed(t *testing.T) {
	for name, c := range r23Clients(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
			rt, err := runtime.New(s, runtime.WithLease(3*time.Second), runtime.WithMaxWait(0),
				runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
					if e.Kind == runtime.EventClaimed {
						goruntime.Goexit()
					}
				})))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := runtime.Identity{Operation: "R23.RedisClaim", Key: "k"}
			how := r23Run(func() {
				_, _ = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "r",
					Effect: func(context.Context, string) (int, error) { return 1, nil }})
			})
			rec, err := s.Get(ctx, id)
			if err != nil && !errors.Is(err, runtime.ErrNotFound) { // not found: released
				t.Fatal(err)
			}
			t.Logf("Do %s; record %s live %v", how, rec.State, rec.LeaseLive())
			if rec.State == runtime.StateProcessing && rec.LeaseLive() {
				t.Errorf("the call left (Goexit in the observer on EventClaimed) with its record PROCESSING and a live lease (%v more)",
					rec.LeaseExpiresAt.Sub(rec.StoreNow).Round(time.Millisecond))
			}
		})
	}
}

// TestR23RedisReconcilerTwoGoexits: F2, order-independent: the first two
// queries asked call runtime.Goexit; every other record of the batch must
// be converged.
func TestR23RedisReconcilerTwoGoexits(t *testing.T) {
	for name, c := range r23Clients(t) {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
			rt, err := runtime.New(s)
			if err != nil {
				t.Fatal(err)
			}
			const op = "R23.RedisTwoGoexits"
			var mu sync.Mutex
			exited := map[string]bool{}
			var asked atomic.Int32
			err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
				if asked.Add(1) <= 2 {
					mu.Lock()
					exited[req] = true
					mu.Unlock()
					goruntime.Goexit()
				}
				return 1, runtime.OutcomeSucceeded, nil
			}, runtime.QueryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			keys := []string{"a", "b", "c", "d", "e"}
			for _, k := range keys {
				_, err := runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: op, Key: k, Request: k,
					Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified") }})
				if !errors.Is(err, runtime.ErrOutcomeUnknown) {
					t.Fatal(err)
				}
			}
			r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("RunOnce: %s", r23Run(func() { _, _ = r.RunOnce(ctx) }))
			for _, k := range keys {
				if exited[k] {
					continue
				}
				rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: k})
				if err != nil {
					t.Fatal(err)
				}
				if rec.State != runtime.StateSuccess {
					t.Errorf("%s: %s, attempts %d, never queried", k, rec.State, rec.Attempts)
				}
			}
		})
	}
}
