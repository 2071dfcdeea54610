package redisstore_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestReplayWritesNothing: a replay is a read. On a server of its own (so
// no other test's writes count), the server's count of writes since the
// last save does not move over replays, nor over duplicates refused with
// ErrKeyReused or told ErrInProgress.
func TestReplayWritesNothing(t *testing.T) {
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer c.Close()
	ctx := context.Background()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(s, runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	call := func(key string, amount int) runtime.Call[int, int] {
		return runtime.Call[int, int]{Operation: "Pay.Charge", Key: key, Request: amount,
			Effect: func(_ context.Context, n int) (int, error) { return n, nil }}
	}
	if _, err := runtime.Do(ctx, rt, call("k", 1)); err != nil {
		t.Fatal(err)
	}
	// A record in flight, for ErrInProgress.
	if _, err := s.Claim(ctx, runtime.ClaimParams{ID: runtime.Identity{Operation: "Pay.Charge", Key: "busy"},
		Fingerprint: runtime.Fingerprint([]byte("1")), Owner: "other", Lease: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	dirty := func() int {
		t.Helper()
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`rdb_changes_since_last_save:(\d+)`).FindStringSubmatch(info)
		if m == nil {
			t.Fatalf("no rdb_changes_since_last_save in INFO persistence:\n%s", info)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := dirty()
	for range 20 {
		if got, err := runtime.Do(ctx, rt, call("k", 1)); err != nil || got != 1 {
			t.Fatalf("replay: %v, %v", got, err)
		}
		if _, err := runtime.Do(ctx, rt, call("k", 2)); err == nil {
			t.Fatal("a key reused with another request was accepted")
		}
		if _, err := runtime.Do(ctx, rt, call("busy", 1)); err == nil {
			t.Fatal("a duplicate in flight was not refused")
		}
	}
	if after := dirty(); after != before {
		t.Fatalf("60 replays and refusals wrote %d times", after-before)
	}
}
