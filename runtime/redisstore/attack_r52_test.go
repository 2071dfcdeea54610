package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/redisstore"
)

// Review r52's finding F2. README, the lease rule: an effect that ignored the
// cancellation returns "its own answer ... (the CAS fails if anyone took
// over; then ErrLeaseLost is returned)"; docs/redisstore.md "Recognised
// retries": a resend finds "its write in lt". Tokens were owner#counter
// from 1 (now with a random part per runtime): a later process given the
// same WithOwner (a restarted pod named by its host name) made the same
// tokens as the one before it, and lt survives claims. Schedule: life 1 (owner pod-a) records SUCCESS with a
// short TTL (lt = pod-a#1); life 2 (owner pod-a again, renewals dropped)
// claims the expired key, its effect ignores the lease rule; pod-b takes
// the record over; life 2's effect returns and its first outcome write
// (token pod-a#1) fails its CAS.
func TestR52OwnerReusedTokenTakenForOwnWrite(t *testing.T) {
	stores := map[string]func() runtime.Store{"memory (control)": func() runtime.Store { return memstore.New() }}
	for name, c := range r23Clients(t) {
		stores[name] = func() runtime.Store { return newStore(t, c, redisstore.WithPrefix(testPrefix(t))) }
	}
	for name, mk := range stores {
		for _, mode := range []string{"success", "failed", "control-distinct-owners"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				testenv.Within(t, 20*time.Second, func() {
					ctx := context.Background()
					s := mk()
					call := func(eff func(context.Context, string) (string, error)) runtime.Call[string, string] {
						return runtime.Call[string, string]{Operation: "R52.Owner", Key: "k", Request: "r", Effect: eff}
					}
					// Two runtimes of one process on one store value, each given
					// the process's owner.
					rt1, err := runtime.New(s, runtime.WithOwner("pod-a"), runtime.WithTTL(50*time.Millisecond))
					if err != nil {
						t.Error(err)
						return
					}
					owner2 := "pod-a"
					if mode == "control-distinct-owners" {
						owner2 = "pod-a2"
					}
					rt2, err := runtime.New(teststores.NoRenewals{Store: s}, runtime.WithOwner(owner2), runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(0))
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := runtime.Do(ctx, rt1, call(func(context.Context, string) (string, error) { return "one", nil })); err != nil {
						t.Errorf("life 1: %v", err)
						return
					}
					time.Sleep(200 * time.Millisecond)
					rt3, err := runtime.New(s, runtime.WithOwner("pod-b"), runtime.WithMaxWait(5*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					var runs atomic.Int32
					taken, done2 := make(chan struct{}), make(chan struct{})
					type result struct {
						resp string
						err  error
					}
					res2 := make(chan result, 1)
					go func() {
						resp, err := runtime.Do(ctx, rt2, call(func(context.Context, string) (string, error) {
							runs.Add(1)
							<-taken // ignores its context
							if mode == "failed" {
								return "", runtime.Permanent(errors.New("declined"))
							}
							return "two", nil
						}))
						res2 <- result{resp, err}
						close(done2)
					}()
					for runs.Load() == 0 {
						time.Sleep(time.Millisecond)
					}
					resp3, err3 := runtime.Do(ctx, rt3, call(func(context.Context, string) (string, error) {
						runs.Add(1)
						close(taken)
						<-done2
						return "three", nil
					}))
					r2 := <-res2
					rec, gerr := s.Get(ctx, runtime.Identity{Operation: "R52.Owner", Key: "k"})
					t.Logf("rt2: %q, %v; pod-b: %q, %v; record: %s owner %q v%d %q (%v); runs %d", r2.resp, r2.err, resp3, err3, rec.State, rec.Owner, rec.Version, rec.Response, gerr, runs.Load())
					if !errors.Is(r2.err, runtime.ErrLeaseLost) {
						t.Errorf("rt2, whose lease pod-b took over before its outcome was written: %q, %v (ErrPermanent %v); want ErrLeaseLost", r2.resp, r2.err, errors.Is(r2.err, runtime.ErrPermanent))
					}
				})
			})
		}
	}
}
