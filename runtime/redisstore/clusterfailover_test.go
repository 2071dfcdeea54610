package redisstore_test

import (
	"context"
	"errors"
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

// TestClusterFailover fails every master of a 3-master cluster over to its
// replica in turn (CLUSTER FAILOVER on the replica, as an operator does
// before maintenance) while clients call runtime.Do and a reconciler
// converges UNKNOWN records with a query. go-redis follows the MOVED
// replies of the demoted masters and the scripts' retries are idempotent:
// afterwards no effect ran twice, every effect that ran has its SUCCESS
// record (none lost), every record converged, replays answer without
// running the effect, and the indexes are consistent.
func TestClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c := cl.NewClient(&redis.ClusterOptions{PoolSize: 16, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
	rt, err := runtime.New(s, runtime.WithLease(3*time.Second), runtime.WithMaxWait(2*time.Second),
		runtime.WithCompletionTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const op = "T.ClusterFailover"
	ctx := runtime.WithScope(context.Background(), "cluster-failover")

	// The downstream: a ledger of effects. One key in four times out after
	// its effect happened, so its record is UNKNOWN until the reconciler's
	// query finds the effect in the ledger.
	var mu sync.Mutex
	runs := map[string]int{}
	effect := func(_ context.Context, key string) (string, error) {
		mu.Lock()
		runs[key]++
		mu.Unlock()
		var n int
		if _, err := fmt.Sscanf(key, "k%d", &n); err == nil && n%4 == 0 {
			return "", fmt.Errorf("charging %s: %w", key, context.DeadlineExceeded)
		}
		return "resp-" + key, nil
	}
	query := func(_ context.Context, key string) (string, runtime.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		if runs[key] > 0 {
			return "resp-" + key, runtime.OutcomeSucceeded, nil
		}
		return "", runtime.OutcomeNotHappened, nil
	}
	if err := runtime.Register(rt, op, query, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	do := func(key string) (string, error) {
		return runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: op, Key: key, Request: key, Effect: effect})
	}

	rec, err := runtime.NewReconciler(rt, runtime.ReconcileInterval(20*time.Millisecond),
		runtime.ReconcileLease(3*time.Second), runtime.ReconcileBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopReconciler := context.WithCancel(context.Background())
	reconciled := make(chan error, 1)
	go func() { reconciled <- rec.Run(rctx) }()
	defer func() {
		stopReconciler()
		if err := <-reconciled; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("reconciler: %v", err)
		}
	}()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int32
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", r.IntN(120))
				got, err := do(key)
				switch {
				case err == nil && got != "resp-"+key:
					t.Errorf("%s: response %q", key, got)
				case err == nil:
					ok.Add(1)
				default:
					failed.Add(1) // UNKNOWN, a wait that timed out, a store error during a failover
				}
			}
		}()
	}

	time.Sleep(300 * time.Millisecond)
	masters, err := cl.Masters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		replicas, err := cl.ReplicasOf(context.Background(), m)
		if err != nil || len(replicas) == 0 {
			t.Fatalf("replicas of %s: %v %v", m.Addr, replicas, err)
		}
		start := time.Now()
		if err := cl.Failover(context.Background(), replicas[0]); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s took over from %s in %v", replicas[0].Addr, m.Addr, time.Since(start).Round(time.Millisecond))
		time.Sleep(300 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("calls during the failovers: %d answered, %d errors", ok.Load(), failed.Load())

	// Every record converges: UNKNOWN ones by the reconciler's query, the
	// PROCESSING ones a failed call left by lease expiry and reconciliation.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err := s.List(context.Background(), runtime.ListParams{Limit: 1000})
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records not converged after 30s: %d (%v)", len(left), err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	ran := make(map[string]int, len(runs))
	for k, n := range runs {
		ran[k] = n
	}
	mu.Unlock()
	if len(ran) < 30 {
		t.Fatalf("only %d keys ran: the load did not reach the cluster", len(ran))
	}
	for key, n := range ran {
		if n != 1 {
			t.Errorf("%s: effect ran %d times", key, n)
		}
		r, err := s.Get(context.Background(), runtime.Identity{Scope: "cluster-failover", Operation: op, Key: key})
		if err != nil || r.State != runtime.StateSuccess {
			t.Errorf("%s: record %s, %v; want SUCCESS (the effect ran)", key, r.State, err)
			continue
		}
		if got, err := do(key); err != nil || got != "resp-"+key {
			t.Errorf("%s: replay = %q, %v", key, got, err)
		}
	}
	mu.Lock()
	for key, n := range runs {
		if n != ran[key] {
			t.Errorf("%s: a replay ran the effect again", key)
		}
	}
	mu.Unlock()
	if _, err := redisstore.CheckIndexes(context.Background(), s); err != nil {
		t.Error(err)
	}
}
