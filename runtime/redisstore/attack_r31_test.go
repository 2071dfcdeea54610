package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestR31AcquireRunsUnderConcurrentShifts (held: it passes). docs/redisstore.md
// and AcquirePending's doc: "however many skipped entries lie ahead of a due
// record, the call reaches it"; "Each bucket's script is atomic, so two
// callers never acquire the same record". The runs of one call start at a
// rank; concurrent callers of another operation move entries ahead of that
// rank out between the runs. Schedule, one bucket, standalone and Cluster:
// 2300 UNKNOWN records of another operation (score 0, ahead), 40 crashed
// workers' PROCESSING records of ours behind them; 3 callers of ours (limit
// 7, MaxAttempts 3) and 1 of the other operation (limit 50) run at once
// until each finds nothing; then one more call of ours. Each of our records
// must be acquired exactly once, none left, none of another operation.
func TestR31AcquireRunsUnderConcurrentShifts(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			var c redis.UniversalClient
			if kind == "standalone" {
				opt, err := redis.ParseURL(testenv.RedisURL(t))
				if err != nil {
					t.Fatal(err)
				}
				c = redis.NewClient(opt)
			} else {
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
			}
			t.Cleanup(func() { c.Close() })
			prefix := "idemtest-r31-" + teststores.Unique() + ":"
			t.Cleanup(func() {
				ctx := context.Background()
				var keys []string
				iter := c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					keys = append(keys, iter.Val())
				}
				for _, k := range keys {
					c.Del(ctx, k)
				}
			})
			st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithBuckets(1))
			if err != nil {
				t.Fatal(err)
			}
			// The setup (4,680 round trips, one after another) has a bound of
			// its own: under CI's load it took more than the 15 s the
			// concurrent calls below get.
			setup, cancelSetup := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancelSetup()
			fp := runtime.Fingerprint([]byte(`"r"`))
			const nOther, nMine = 2300, 40
			pipeClaim := func(op, key string, lease time.Duration) runtime.Record {
				cr, err := st.Claim(setup, runtime.ClaimParams{ID: runtime.Identity{Operation: op, Key: key}, Fingerprint: fp, Request: []byte(`"r"`), Owner: "w", Lease: lease})
				if err != nil || !cr.Claimed {
					t.Fatalf("claim %s %s: %v %+v", op, key, err, cr)
				}
				return cr.Record
			}
			for i := range nOther {
				id := runtime.Identity{Operation: "r31.other", Key: fmt.Sprintf("o%d", i)}
				rec := pipeClaim(id.Operation, id.Key, time.Minute)
				if _, err := st.Transition(setup, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w", Version: rec.Version,
					To: runtime.StateUnknown, Token: "t" + id.Key}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range nMine {
				pipeClaim("r31.mine", fmt.Sprintf("m%d", i), 50*time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()

			var mu sync.Mutex
			got := map[string]int{}
			var wrong []string
			var wg sync.WaitGroup
			for w := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						recs, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: fmt.Sprintf("rec%d", w), Lease: time.Minute, Limit: 7, MaxAttempts: 3, Operations: []string{"r31.mine"}})
						mu.Lock()
						for _, r := range recs {
							if r.ID.Operation != "r31.mine" {
								wrong = append(wrong, r.ID.Operation)
							}
							got[r.ID.Key]++
						}
						mu.Unlock()
						if err != nil {
							t.Error(err)
							return
						}
						if len(recs) == 0 {
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					recs, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: "other", Lease: time.Minute, Limit: 50, MaxAttempts: 100, Operations: []string{"r31.other"}})
					if err != nil {
						t.Error(err)
						return
					}
					if len(recs) == 0 {
						return
					}
				}
			}()
			wg.Wait()
			last, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: "last", Lease: time.Minute, Limit: 100, MaxAttempts: 3, Operations: []string{"r31.mine"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range last {
				got[r.ID.Key]++
			}
			if ctx.Err() != nil {
				t.Fatal("over 15 s")
			}
			var twice, missing []string
			for i := range nMine {
				switch k := fmt.Sprintf("m%d", i); got[k] {
				case 1:
				case 0:
					missing = append(missing, k)
				default:
					twice = append(twice, k)
				}
			}
			t.Logf("acquired %d distinct of %d (last call %d); twice %v, missing %v, other operations %d", len(got), nMine, len(last), twice, missing, len(wrong))
			if len(twice) > 0 || len(missing) > 0 || len(wrong) > 0 {
				t.Fatalf("twice %v, missing %v, other operations %v", twice, missing, wrong)
			}
		})
	}
}
