package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Promise: the effect "runs at most once per identity" and bad input gets
// a clear error, never a panic. Attack: Call.Lease and Call.TTL overrides
// that are tiny, zero or negative. Each call must either be refused before
// the effect runs or keep exactly-once across a duplicate.
func TestReviewDoOddLeaseAndTTL(t *testing.T) {
	for _, c := range []struct {
		name       string
		lease, ttl time.Duration
	}{
		{"lease 1ns", time.Nanosecond, 0},
		{"lease 2ns", 2 * time.Nanosecond, 0},
		{"lease -1s", -time.Second, 0},
		{"lease 1ms", time.Millisecond, 0},
		{"ttl 1ns", 0, time.Nanosecond},
		{"ttl -1h", 0, -time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			reviewEach(t, func(t *testing.T, store runtime.Store) {
				rt, err := runtime.New(store, runtime.WithMaxWait(0))
				if err != nil {
					t.Fatal(err)
				}
				ctx := reviewCtx()
				var effects atomic.Int32
				call := runtime.Call[reviewReq, string]{Operation: "Review.Odd", Key: "k1", Request: reviewReq{1}, Lease: c.lease, TTL: c.ttl,
					Effect: func(ctx context.Context, r reviewReq) (string, error) {
						effects.Add(1)
						time.Sleep(20 * time.Millisecond)
						return "ok", nil
					}}
				do := func() (err error) {
					defer func() {
						if v := recover(); v != nil {
							err = fmt.Errorf("panic: %v", v)
						}
					}()
					_, err = runtime.Do(ctx, rt, call)
					return err
				}
				err1 := do()
				time.Sleep(10 * time.Millisecond)
				err2 := do()
				t.Logf("first: %v; duplicate: %v; effects %d", err1, err2, effects.Load())
				for _, err := range []error{err1, err2} {
					if err != nil && len(err.Error()) > 7 && err.Error()[:6] == "panic:" {
						t.Fatalf("Do panicked: %v", err)
					}
				}
				if err1 != nil && effects.Load() == 0 {
					return // refused up front
				}
				if effects.Load() != 1 || (err2 != nil && !errors.Is(err2, runtime.ErrInProgress)) {
					t.Fatalf("effect ran %d times; first %v, duplicate %v: an odd Lease/TTL broke exactly-once", effects.Load(), err1, err2)
				}
			})
		})
	}
}
