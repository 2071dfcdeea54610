package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// failNthAcquire fails the nth run of the acquire script (EVALSHA or EVAL
// with two keys, the first a pending index) before it is sent: the bucket
// it was for stays as it was.
type failNthAcquire struct {
	n    int32
	seen atomic.Int32
}

var errInjected = errors.New("injected: connection reset")

func (h *failNthAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failNthAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failNthAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if name := strings.ToLower(cmd.Name()); (name == "evalsha" || name == "eval") && len(a) > 3 &&
			fmt.Sprint(a[2]) == "3" && strings.HasSuffix(fmt.Sprint(a[3]), "}:pending") {
			if h.seen.Add(1) == h.n {
				cmd.SetErr(errInjected)
				return errInjected
			}
		}
		return next(ctx, cmd)
	}
}

// TestAcquirePendingPartial makes the acquire script of the second bucket
// visited fail: AcquirePending must return the error together with the
// records it acquired from the first bucket, which the store now holds for
// the caller (owner, lease, an attempt used), so that the reconciler can
// converge them instead of stranding them. Exactly the returned records are
// held by the caller.
func TestAcquirePendingPartial(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient {
			opt, err := redis.ParseURL(testenv.RedisURL(t))
			if err != nil {
				t.Fatal(err)
			}
			return redis.NewClient(opt)
		}},
		{"cluster", func(t *testing.T) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.client(t)
			defer c.Close()
			hook := &failNthAcquire{n: 2}
			c.AddHook(hook)
			s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithBuckets(4))
			ctx := context.Background()
			// Loaded scripts: one EVALSHA per bucket, no NOSCRIPT then EVAL.
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			var ids []runtime.Identity
			buckets := map[string]bool{}
			for i := range 16 {
				id := runtime.Identity{Scope: "partial", Operation: "T.Partial", Key: fmt.Sprint("k", i)}
				u := mustClaim(t, s, claimP(id, "w", time.Minute))
				mustFinish(t, s, u, runtime.StateUnknown, 0)
				ids = append(ids, id)
				_, pend, _ := redisstore.KeysOf(s, id)
				buckets[pend] = true
			}
			if len(buckets) < 2 {
				t.Fatalf("records in %d bucket(s), want 2 or more", len(buckets))
			}

			got, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler", Lease: time.Hour, Limit: 100, MaxAttempts: 1})
			if !errors.Is(err, errInjected) {
				t.Fatalf("AcquirePending error = %v, want the injected failure", err)
			}
			if len(got) == 0 {
				t.Fatal("AcquirePending returned no records with its error; the first bucket's were acquired")
			}
			for _, id := range ids {
				rec, err := s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				returned := slices.ContainsFunc(got, func(r runtime.Record) bool {
					return r.ID == id && r.Version == rec.Version && r.Owner == "reconciler"
				})
				if held := rec.Owner == "reconciler"; held != returned {
					t.Errorf("%s: held by the reconciler %v (attempts %d), returned %v", id.Key, held, rec.Attempts, returned)
				}
			}
			// The rest is acquired by the next call, none twice.
			rest, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler", Lease: time.Hour, Limit: 100, MaxAttempts: 1})
			if err != nil || len(got)+len(rest) != len(ids) {
				t.Errorf("second call: %d records, %v; want the other %d", len(rest), err, len(ids)-len(got))
			}
		})
	}
}
