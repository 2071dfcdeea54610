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
// converges UNKNOWN records with a query (see clusterLoad for the checks).
// go-redis follows the MOVED replies of the demoted masters, and the
// promoted replicas get the scripts by EVAL on their first NOSCRIPT.
func TestClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	l := startClusterLoad(t, cl)
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
	l.finish()
}

// TestReshardUnderLoad moves the slots of half the buckets, each to another
// master, indexes first and then a few records per MIGRATE with pauses
// between them (as redis-cli --cluster reshard does, only slower), while clients call runtime.Do on
// identities of those buckets and others and a reconciler converges
// UNKNOWN records (see clusterLoad for the checks).
func TestReshardUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	l := startClusterLoad(t, cl)
	ctx := context.Background()
	time.Sleep(300 * time.Millisecond)
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for b := 0; b < loadBuckets; b += 2 {
		slot, err := cl.KeySlot(ctx, fmt.Sprintf("%s{%d}:pending", l.prefix, b))
		if err != nil {
			t.Fatal(err)
		}
		from, err := cl.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := masters[(moved+1)%len(masters)]
		if to == from {
			to = masters[(moved+2)%len(masters)]
		}
		m, err := cl.BeginMigration(ctx, slot, to)
		if err != nil {
			t.Fatal(err)
		}
		// The bucket's indexes and counter first (the order of redis-cli's
		// GETKEYSINSLOT is arbitrary; this one leaves every record on the
		// source while the scripts run on the target), then its records.
		tag := fmt.Sprintf("%s{%d}:", l.prefix, b)
		if err := m.Move(ctx, tag+"pending", tag+"expiry", tag+"version"); err != nil {
			t.Fatal(err)
		}
		keys := 3
		// A reconciler pass runs while every record is on the source and
		// the scripts on the target (UNKNOWN records wait for it, their
		// completions refused meanwhile: TRYAGAIN).
		time.Sleep(loadReconcileEvery + 50*time.Millisecond)
		for {
			time.Sleep(20 * time.Millisecond) // the load runs on the split slot
			batch, err := m.Keys(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) == 0 {
				break
			}
			if err := m.Move(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			keys += len(batch)
		}
		if err := m.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("bucket %d (slot %d, %d keys) moved from %s to %s", b, slot, keys, from.Addr, to.Addr)
		moved++
	}
	l.finish()
}

// clusterLoad is four clients calling runtime.Do on 120 identities, and a
// reconciler, on a cluster the test reshards or fails over meanwhile. The
// downstream is a ledger of effects; one key in four times out after its
// effect happened, so its record is UNKNOWN until the reconciler's query
// finds the effect in the ledger. finish stops the clients, waits for every
// record to converge and checks that no effect ran twice, every effect
// that ran has its SUCCESS record (none lost), replays answer without
// running the effect, and the indexes are consistent.
type clusterLoad struct {
	t      *testing.T
	s      *redisstore.Store
	prefix string
	do     func(key string) (string, error)

	mu   sync.Mutex
	runs map[string]int

	stop           chan struct{}
	wg             sync.WaitGroup
	ok, failed     atomic.Int32
	stopReconciler context.CancelFunc
	reconciled     chan error
}

const (
	loadOp      = "T.ClusterLoad"
	loadBuckets = 16
	// The reconciler's interval: UNKNOWN records wait for it a while, so
	// that due ones are in the indexes when slots move.
	loadReconcileEvery = 250 * time.Millisecond
)

func startClusterLoad(t *testing.T, cl *redistest.Cluster) *clusterLoad {
	c := cl.NewClient(&redis.ClusterOptions{PoolSize: 16, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	l := &clusterLoad{t: t, prefix: testPrefix(t), runs: map[string]int{}, stop: make(chan struct{}), reconciled: make(chan error, 1)}
	// 16 buckets: about 8 of the 120 identities in each.
	l.s = newStore(t, c, redisstore.WithPrefix(l.prefix), redisstore.WithBuckets(loadBuckets))
	rt, err := runtime.New(l.s, runtime.WithLease(3*time.Second), runtime.WithMaxWait(2*time.Second),
		runtime.WithCompletionTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	effect := func(_ context.Context, key string) (string, error) {
		l.mu.Lock()
		l.runs[key]++
		l.mu.Unlock()
		var n int
		if _, err := fmt.Sscanf(key, "k%d", &n); err == nil && n%4 == 0 {
			return "", fmt.Errorf("charging %s: %w", key, context.DeadlineExceeded)
		}
		return "resp-" + key, nil
	}
	query := func(_ context.Context, key string) (string, runtime.Outcome, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.runs[key] > 0 {
			return "resp-" + key, runtime.OutcomeSucceeded, nil
		}
		return "", runtime.OutcomeNotHappened, nil
	}
	if err := runtime.Register(rt, loadOp, query, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "cluster-load")
	l.do = func(key string) (string, error) {
		return runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: loadOp, Key: key, Request: key, Effect: effect})
	}

	rec, err := runtime.NewReconciler(rt, runtime.ReconcileInterval(loadReconcileEvery),
		runtime.ReconcileLease(3*time.Second), runtime.ReconcileBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var rctx context.Context
	rctx, l.stopReconciler = context.WithCancel(context.Background())
	go func() { l.reconciled <- rec.Run(rctx) }()
	t.Cleanup(l.endReconciler)

	for w := range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", r.IntN(120))
				got, err := l.do(key)
				switch {
				case err == nil && got != "resp-"+key:
					t.Errorf("%s: response %q", key, got)
				case err == nil:
					l.ok.Add(1)
				default:
					l.failed.Add(1) // UNKNOWN, a wait that timed out, a store error meanwhile
				}
			}
		}()
	}
	return l
}

func (l *clusterLoad) endReconciler() {
	if l.stopReconciler == nil {
		return
	}
	l.stopReconciler()
	l.stopReconciler = nil
	if err := <-l.reconciled; err != nil && !errors.Is(err, context.Canceled) {
		l.t.Errorf("reconciler: %v", err)
	}
}

func (l *clusterLoad) finish() {
	t := l.t
	close(l.stop)
	l.wg.Wait()
	t.Logf("calls meanwhile: %d answered, %d errors", l.ok.Load(), l.failed.Load())

	// Every record converges: UNKNOWN ones by the reconciler's query, the
	// PROCESSING ones a failed call left by lease expiry and reconciliation.
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err := l.s.List(ctx, runtime.ListParams{Limit: 1000})
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records not converged after 30s: %d (%v)", len(left), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.endReconciler()

	l.mu.Lock()
	ran := make(map[string]int, len(l.runs))
	for k, n := range l.runs {
		ran[k] = n
	}
	l.mu.Unlock()
	if len(ran) < 30 {
		t.Fatalf("only %d keys ran: the load did not reach the cluster", len(ran))
	}
	for key, n := range ran {
		if n != 1 {
			t.Errorf("%s: effect ran %d times", key, n)
		}
		r, err := l.s.Get(ctx, runtime.Identity{Scope: "cluster-load", Operation: loadOp, Key: key})
		if err != nil || r.State != runtime.StateSuccess {
			t.Errorf("%s: record %s, %v; want SUCCESS (the effect ran)", key, r.State, err)
			continue
		}
		if got, err := l.do(key); err != nil || got != "resp-"+key {
			t.Errorf("%s: replay = %q, %v", key, got, err)
		}
	}
	l.mu.Lock()
	for key, n := range l.runs {
		if n != ran[key] {
			t.Errorf("%s: a replay ran the effect again", key)
		}
	}
	l.mu.Unlock()
	if _, err := redisstore.CheckIndexes(ctx, l.s); err != nil {
		t.Error(err)
	}
}
