package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
	"github.com/idemkit/idem/runtime/storetest"
)

var (
	standaloneOnce sync.Once
	standalone     *redis.Client
	clusterOnce    sync.Once
	cluster        *redis.ClusterClient
)

// standaloneClient connects once per test binary to IDEM_TEST_REDIS_URL.
func standaloneClient(t testing.TB) *redis.Client {
	t.Helper()
	url := testenv.RedisURL(t)
	standaloneOnce.Do(func() {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("%s: %v", testenv.RedisURLVar, err)
		}
		opt.PoolSize = 64
		standalone = redis.NewClient(opt)
	})
	if standalone == nil {
		t.Fatalf("%s: no client", testenv.RedisURLVar)
	}
	if err := standalone.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", url, err)
	}
	return standalone
}

// clusterClient connects once per test binary to IDEM_TEST_REDIS_CLUSTER_ADDRS.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs(t)
	clusterOnce.Do(func() {
		cluster = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 32})
	})
	ctx := context.Background()
	if err := cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatalf("Redis Cluster at %v: %v", addrs, err)
	}
	return cluster
}

func newStore(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testPrefix returns a key prefix no other test uses. The conformance suite
// isolates its records by scope, but AcquirePending (like Sweep) is global
// to a store: a suite case that acquires with a large limit would take
// records another parallel case is about to acquire or converge. One prefix
// per case gives each its own store, as memstore.New does.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("idemtest:%d:", prefixSeq.Add(1)) + fmt.Sprintf("%x:", time.Now().UnixNano())
}

var prefixSeq atomic.Int64

// claimOrders are the orders of a claim's steps the conformance suite runs
// in: as the store guesses it, always reading the record first, always
// running the claim script first.
var claimOrders = []claimOrder{{"guessed", 0}, {"read-first", 1}, {"script-first", -1}}

type claimOrder struct {
	name  string
	order int
}

// conformance runs the suite on c in the given claim orders.
func conformance(t *testing.T, c redis.UniversalClient, orders []claimOrder) {
	for _, tc := range orders {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) runtime.Store {
				s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
				redisstore.SetClaimOrder(s, tc.order)
				return s
			})
		})
	}
}

func TestConformance(t *testing.T) {
	conformance(t, standaloneClient(t), claimOrders)
}

func TestConformanceCluster(t *testing.T) {
	c := clusterClient(t)
	var masters atomic.Int32
	if err := c.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error {
		masters.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := masters.Load(); n < 3 {
		t.Fatalf("cluster has %d masters, want at least 3", n)
	}
	// The guessed order only: the read and the script are the same code on
	// a Cluster as on a standalone server (which runs the suite in every
	// order), and TestReadFirstAgreesWithScript compares the two paths on
	// the Cluster state by state. Each order costs about 15 s of CI.
	conformance(t, c, claimOrders[:1])
}

// TestClusterSlots checks on a real cluster that a record and the indexes of
// its bucket share a slot, and that buckets spread over every master.
func TestClusterSlots(t *testing.T) {
	c := clusterClient(t)
	ctx := context.Background()
	s := newStore(t, c)
	id := runtime.Identity{Scope: "tenant{x}:a|b", Operation: "Svc.Op", Key: "k:{1}"}
	rec, pending, expiry := redisstore.KeysOf(s, id)
	var slots []int64
	for _, k := range []string{rec, pending, expiry} {
		n, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, n)
	}
	if slots[0] != slots[1] || slots[0] != slots[2] {
		t.Fatalf("record %q and its indexes are in slots %v, want one slot", rec, slots)
	}
	// Every master serves some bucket, so AcquirePending must visit them all.
	owners := make(map[string]bool)
	for b := range redisstore.DefaultBuckets {
		_, pending, _ := redisstore.KeysOf(s, runtime.Identity{Key: fmt.Sprint(b)})
		shard, err := c.MasterForKey(ctx, pending)
		if err != nil {
			t.Fatal(err)
		}
		owners[shard.Options().Addr] = true
	}
	if len(owners) < 3 {
		t.Fatalf("buckets live on %d masters, want all 3", len(owners))
	}
}

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for name, opt := range map[string]redisstore.Option{
		"brace in prefix": redisstore.WithPrefix("a{b"),
		"zero buckets":    redisstore.WithBuckets(0),
		"too many":        redisstore.WithBuckets(16385),
		"negative grace":  redisstore.WithExpiryGrace(-time.Second),
		"zero max bytes":  redisstore.WithMaxRecordBytes(0),
	} {
		if _, err := redisstore.New(c, opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := redisstore.New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

func TestTooLarge(t *testing.T) {
	s := newStore(t, standaloneClient(t), redisstore.WithMaxRecordBytes(16))
	ctx := context.Background()
	id := runtime.Identity{Scope: "toolarge/" + time.Now().Format(time.RFC3339Nano), Operation: "T.Large", Key: "k"}
	_, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte(strings.Repeat("x", 17)), Owner: "w", Lease: time.Minute})
	if !errors.Is(err, runtime.ErrTooLarge) || !strings.Contains(err.Error(), "request is 17 bytes, the limit is 16") {
		t.Fatalf("claim error = %v, want ErrTooLarge naming the sizes", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("a refused claim left a record: %v", err)
	}
	res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte("small"), Owner: "w", Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %v %+v", err, res)
	}
	_, err = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w", Version: res.Record.Version,
		To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(strings.Repeat("y", 100))})
	if !errors.Is(err, runtime.ErrTooLarge) || !strings.Contains(err.Error(), "response is 100 bytes") {
		t.Fatalf("transition error = %v, want ErrTooLarge", err)
	}
	if got, _ := s.Get(ctx, id); got.State != runtime.StateProcessing || got.Version != res.Record.Version {
		t.Fatalf("a refused transition changed the record: %+v", got)
	}

	// Through the runtime: the caller gets ErrTooLarge and the effect never runs.
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	_, err = runtime.Do(runtime.WithScope(ctx, id.Scope), rt, runtime.Call[string, string]{Operation: "T.Large", Key: "k2", Request: strings.Repeat("x", 64),
		Effect: func(context.Context, string) (string, error) { runs.Add(1); return "", nil }})
	if !errors.Is(err, runtime.ErrTooLarge) || runs.Load() != 0 {
		t.Fatalf("Do error = %v (effect runs %d), want ErrTooLarge and no run", err, runs.Load())
	}
}

// tripHook records the commands of each round trip to Redis: a single
// command or a pipeline.
type tripHook struct {
	mu    sync.Mutex
	trips []string // each: the commands' names, space-separated
}

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

// add records one round trip; a new connection's handshake (HELLO, CLIENT
// SETINFO) belongs to no step of a call and is left out.
func (h *tripHook) add(cmds ...redis.Cmder) {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	if names[0] == "hello" || names[0] == "client" {
		return
	}
	h.mu.Lock()
	h.trips = append(h.trips, strings.Join(names, " "))
	h.mu.Unlock()
}

func (h *tripHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// TestRoundTrips checks what each step of runtime.Do sends to Redis, on a
// single server and on Cluster (there the hook sits on every node's client,
// so it sees what goes on the wire, whichever way the store routes it). A
// first call is two scripts (claim, complete). A replay is one round trip:
// the claim script while the store expects first calls, and once it has
// seen a replay, a pipeline of HGETALL and TIME with no script at all. A
// first call that comes while the store expects replays pays that read
// once more before its two scripts.
func TestRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T, h *tripHook) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T, h *tripHook) redis.UniversalClient {
			opt, err := redis.ParseURL(testenv.RedisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(opt)
			c.AddHook(h)
			return c
		}},
		{"cluster", func(t *testing.T, h *tripHook) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
			c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook := &tripHook{}
			c := tc.client(t, hook)
			defer c.Close()
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)))
			ctx := context.Background()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			rt, err := runtime.New(s)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			do := func(key string) {
				t.Helper()
				got, err := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "T.RoundTrips", Key: key, Request: "req",
					Effect: func(context.Context, string) (string, error) { runs.Add(1); return "resp", nil }})
				if err != nil || got != "resp" {
					t.Fatalf("Do = %q, %v", got, err)
				}
			}
			keys := int32(2)
			if tc.name == "cluster" { // the client learns the slots: not a step of a call
				do("warm-up")
				keys++
			}
			const script, read = "evalsha", "hgetall time"
			for _, step := range []struct {
				name, key string
				want      []string
			}{
				{"first call on a new store", "first", []string{script, script}},
				{"first replay", "first", []string{script}},
				{"replay", "first", []string{read}},
				{"replay again", "first", []string{read}},
				{"first call among replays", "second", []string{read, script, script}},
				{"its replay", "second", []string{read}},
			} {
				hook.take()
				do(step.key)
				if got := hook.take(); !slices.Equal(got, step.want) {
					t.Errorf("%s: round trips %q, want %q", step.name, got, step.want)
				}
			}
			if n := runs.Load(); n != keys {
				t.Errorf("effect ran %d times, want once per key", n)
			}
		})
	}
}
