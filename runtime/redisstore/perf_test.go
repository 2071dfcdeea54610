package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/benchcmp"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
)

type perfReq struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

type perfResp struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

// BenchmarkPerf runs runtime.Do on the Redis store beside its floor at 1,
// 8 and 32 callers: a first call beside the same two scripts (claim,
// complete) sent raw with go-redis; a replay beside one HGETALL of the
// record. bench/stores.sh reports the a/floor ratios.
func BenchmarkPerf(b *testing.B) {
	opt, err := redis.ParseURL(testenv.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("idemperf:%x:", time.Now().UnixNano())
	s, err := New(c, WithPrefix(prefix), WithExpiryGrace(0))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.LoadScripts(ctx); err != nil {
		b.Fatal(err)
	}
	rt, err := runtime.New(s, runtime.WithTTL(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	do := func(key string) error {
		_, err := runtime.Do(ctx, rt, runtime.Call[perfReq, perfResp]{Operation: "Payments.Charge", Key: key, Request: perfReq{"acct", 100},
			Effect: func(_ context.Context, r perfReq) (perfResp, error) { return perfResp{"ch_1", r.Cents}, nil }})
		return err
	}
	req := []byte(`{"account":"acct","cents":100}`)
	resp := []byte(`{"charge_id":"ch_1","cents":100}`)
	fp := runtime.Fingerprint(req)
	raw := func(key string) error {
		k := s.keysOf(runtime.Identity{Operation: "Raw.Charge", Key: key})
		keys := []string{k.rec, k.pending, k.expiry, k.ver}
		vals, err := claimScript.Run(ctx, c, keys, fp, "owner-1", int64(30_000_000), req, "0",
			"", "Raw.Charge", key, "raw-c"+key, int64(0)).Slice()
		if err != nil {
			return err
		}
		if vals[0] != int64(1) {
			return fmt.Errorf("%s not claimed", key)
		}
		vals, err = transitionScript.Run(ctx, c, keys, "PROCESSING", "owner-1", vals[8], "SUCCESS", "",
			int64(0), time.Minute.Microseconds(), resp, "1", int64(0), "raw-t"+key, "", "0").Slice()
		if err != nil {
			return err
		}
		if vals[0] != int64(1) {
			return fmt.Errorf("%s: lease lost", key)
		}
		return nil
	}
	const spread = 2000
	for i := range spread {
		if err := do("s" + strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	get := func(key string) error {
		return c.HGetAll(ctx, s.keysOf(runtime.Identity{Operation: "Payments.Charge", Key: key}).rec).Err()
	}
	for _, callers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("first/callers=%d", callers), func(b *testing.B) {
			p := fmt.Sprintf("f%d-%d-", callers, time.Now().UnixNano())
			benchcmp.Alternating(b, callers,
				func(i int64) error { return do(p + strconv.FormatInt(i, 10)) },
				func(i int64) error { return raw(p + strconv.FormatInt(i, 10)) })
		})
		b.Run(fmt.Sprintf("replay-hot/callers=%d", callers), func(b *testing.B) {
			benchcmp.Alternating(b, callers, func(int64) error { return do("s0") }, func(int64) error { return get("s0") })
		})
		b.Run(fmt.Sprintf("replay-spread/callers=%d", callers), func(b *testing.B) {
			benchcmp.Alternating(b, callers,
				func(i int64) error { return do("s" + strconv.FormatInt(i%spread, 10)) },
				func(i int64) error { return get("s" + strconv.FormatInt(i%spread, 10)) })
		})
	}
}
