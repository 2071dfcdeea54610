package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
)

// BenchmarkClaimComplete measures the happy path (claim, then complete as
// SUCCESS) through the store beside raw go-redis running the same two
// scripts with the same arguments at the same concurrency; bench/redis.sh
// reports the ratio of their throughputs. Each operation uses a new key.
func BenchmarkClaimComplete(b *testing.B) {
	opt, err := redis.ParseURL(testenv.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("idembench:%x:", time.Now().UnixNano())
	// Grace 0: Redis drops finished records right after their 1s TTL, so
	// long runs do not fill the server.
	s, err := New(c, WithPrefix(prefix), WithExpiryGrace(0))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.LoadScripts(ctx); err != nil {
		b.Fatal(err)
	}
	// Fill the connection pool first, so that no measured side pays for
	// dialling.
	var warm sync.WaitGroup
	for range opt.PoolSize {
		warm.Add(1)
		go func() { defer warm.Done(); _ = c.Ping(ctx).Err() }()
	}
	warm.Wait()
	const ttl = time.Second
	fp, req, resp := []byte("0123456789abcdef0123456789abcdef"), []byte(`{"account":"acct-1","amount":100}`), []byte(`{"id":"ch_1","amount":100}`)
	var seq atomic.Int64

	store := func(i int64) error {
		id := runtime.Identity{Scope: "bench", Operation: "Bench.Op", Key: "k" + strconv.FormatInt(i, 10)}
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: "owner-1", Lease: 30 * time.Second})
		if err != nil {
			return err
		}
		if !res.Claimed {
			return fmt.Errorf("%v not claimed", id)
		}
		_, err = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "owner-1",
			Version: res.Record.Version, To: runtime.StateSuccess, TTL: ttl, Response: resp})
		return err
	}
	raw := func(i int64) error {
		n := strconv.FormatInt(i, 10)
		tag := prefix + "{" + strconv.FormatInt(i%DefaultBuckets, 10) + "}:"
		keys := []string{tag + "r:bench:Bench.Op:k" + n, tag + "pending", tag + "expiry", tag + "version"}
		vals, err := claimScript.Run(ctx, c, keys, fp, "owner-1", int64(30_000_000), req, "0",
			"bench", "Bench.Op", "k"+n, "raw-c"+n, int64(0)).Slice()
		if err != nil {
			return err
		}
		if vals[0] != int64(1) {
			return fmt.Errorf("k%s not claimed", n)
		}
		vals, err = transitionScript.Run(ctx, c, keys, "PROCESSING", "owner-1", vals[8], "SUCCESS", "",
			int64(0), ttl.Microseconds(), resp, "1", int64(0), "raw-t"+n, "", "0").Slice()
		if err != nil {
			return err
		}
		if vals[0] != int64(1) {
			return fmt.Errorf("k%s: lease lost", n)
		}
		return nil
	}

	// Interleaved: every goroutine alternates blocks of store and raw
	// operations and times each block, so that load from other processes
	// (a shared CI machine) hits both sides alike; the ratio of the mean
	// latencies is the ratio of throughputs at this concurrency.
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("conc=%d/interleaved", conc), func(b *testing.B) {
			const block = 20
			var next atomic.Int64
			var storeNs, rawNs, storeOps, rawOps atomic.Int64
			var wg sync.WaitGroup
			var once sync.Once
			var firstErr error
			for g := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := g % 2; ; round++ { // half the goroutines start with raw
						fn, ns, ops := store, &storeNs, &storeOps
						if round%2 == 1 {
							fn, ns, ops = raw, &rawNs, &rawOps
						}
						start := time.Now()
						n := int64(0)
						for ; n < block; n++ {
							if next.Add(1) > int64(b.N) {
								break
							}
							if err := fn(seq.Add(1)); err != nil {
								once.Do(func() { firstErr = err })
								return
							}
						}
						ns.Add(int64(time.Since(start)))
						ops.Add(n)
						if n < block {
							return
						}
					}
				}()
			}
			wg.Wait()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			if storeOps.Load() > 0 && rawOps.Load() > 0 {
				storeLat := float64(storeNs.Load()) / float64(storeOps.Load())
				rawLat := float64(rawNs.Load()) / float64(rawOps.Load())
				b.ReportMetric(rawLat/storeLat, "store/raw")
				b.ReportMetric(storeLat/1e3, "store-us/op")
				b.ReportMetric(rawLat/1e3, "raw-us/op")
			}
		})
	}

	for _, conc := range []int{1, 32} {
		for _, bm := range []struct {
			name string
			fn   func(int64) error
		}{{"store", store}, {"raw", raw}} {
			b.Run(fmt.Sprintf("conc=%d/%s", conc, bm.name), func(b *testing.B) {
				b.ReportAllocs()
				var done atomic.Int64
				var wg sync.WaitGroup
				var once sync.Once
				var firstErr error
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for done.Add(1) <= int64(b.N) {
							if err := bm.fn(seq.Add(1)); err != nil {
								once.Do(func() { firstErr = err })
								return
							}
						}
					}()
				}
				wg.Wait()
				if firstErr != nil {
					b.Fatal(firstErr)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
