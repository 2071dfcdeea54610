// Review r46: every script resent across a complete slot migration.

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redistest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// docs/redisstore.md, "Resent commands are safe": a claim, a transition,
// a release and an acquire applied on a stable slot, whose reply is lost;
// the slot then moves whole to another master (the reshard completes);
// the script is resent with the same nonce, now to the new master. Each
// must report what its first run did.
func TestR46ScriptsResentAcrossWholeMigration(t *testing.T) {
	testenv.Within(t, 90*time.Second, func() {
		cl := redistest.StartCluster(t, 3, 0)
		ctx := context.Background()
		ps, _, slot := migrationSetup(t, cl, new(resendHook))
		move := func() {
			t.Helper()
			m, err := beginMove(ctx, cl, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := finishMove(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		// Claim.
		id := runtime.Identity{Scope: "mig", Operation: "Op", Key: "c"}
		p := claimP(id, "w1", time.Minute)
		c1, err := redisstore.ClaimWithNonce(ctx, ps, p, "r46-claim")
		if err != nil || !c1.Claimed {
			t.Fatalf("claim: %+v %v", c1, err)
		}
		move()
		c2, err := redisstore.ClaimWithNonce(ctx, ps, p, "r46-claim")
		if err != nil || !c2.Claimed || c2.Record.Version != c1.Record.Version {
			t.Errorf("claim resent across the migration: claimed %v version %d (first %d), %v", c2.Claimed, c2.Record.Version, c1.Record.Version, err)
		}
		// Transition (no runtime token: the nonce is the token).
		tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1", Version: c1.Record.Version, To: runtime.StateUnknown}
		v1, err := redisstore.TransitionWithNonce(ctx, ps, tp, "r46-tr")
		if err != nil {
			t.Fatal(err)
		}
		move()
		v2, err := redisstore.TransitionWithNonce(ctx, ps, tp, "r46-tr")
		if err != nil || v2 != v1 {
			t.Errorf("transition resent across the migration: %d, %v; want %d", v2, err, v1)
		}
		// Release of a PROCESSING claim.
		rid := runtime.Identity{Scope: "mig", Operation: "Op", Key: "rel"}
		rr := mustClaim(t, ps, claimP(rid, "w2", time.Minute))
		rp := runtime.ReleaseParams{ID: rid, State: rr.State, Owner: "w2", Version: rr.Version}
		if err := redisstore.ReleaseWithNonce(ctx, ps, rp, "r46-rel"); err != nil {
			t.Fatal(err)
		}
		move()
		if err := redisstore.ReleaseWithNonce(ctx, ps, rp, "r46-rel"); err != nil {
			t.Errorf("release resent across the migration: %v; want nil (its own deletion)", err)
		}
		// Acquire.
		for i := range 4 {
			mustClaim(t, ps, claimP(runtime.Identity{Scope: "mig", Operation: "Op", Key: fmt.Sprint("p", i)}, "dead", 50*time.Millisecond))
		}
		time.Sleep(150 * time.Millisecond)
		ap := runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 2, Operations: []string{"Op"}}
		names := func(rs []runtime.Record) string {
			var ks []string
			for _, r := range rs {
				ks = append(ks, r.ID.Key)
			}
			return strings.Join(ks, ",")
		}
		first, err := redisstore.AcquireWithNonce(ctx, ps, ap, "r46-acq")
		if err != nil || len(first) != 2 {
			t.Fatalf("acquire: %v %v", names(first), err)
		}
		move()
		again, err := redisstore.AcquireWithNonce(ctx, ps, ap, "r46-acq")
		if err != nil || names(again) != names(first) {
			t.Errorf("acquire resent across the migration: %v, %v; want %v", names(again), err, names(first))
		}
		var held []string
		for _, k := range []string{"c", "p0", "p1", "p2", "p3"} {
			r, err := ps.Get(ctx, runtime.Identity{Scope: "mig", Operation: "Op", Key: k})
			if err == nil && r.Owner == "rec" {
				held = append(held, k)
			}
		}
		t.Logf("acquired %v, held %v", names(first), held)
		if len(held) != 2 {
			t.Errorf("held by the acquirer: %v; want its first run's %v", held, names(first))
		}
		if _, err := redisstore.CheckIndexes(ctx, ps); err != nil {
			t.Error(err)
		}
	})
}

// r46PausedRedis starts a Redis server of the test's own (the tests pause
// it) and returns its address and an admin client on it.
func r46PausedRedis(t *testing.T) (string, *redis.Client) {
	node := redistest.StartServer(t)
	t.Cleanup(func() { _ = node.Client.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
	return node.Addr, node.Client
}

// The lease rule (README): "A worker that cannot confirm its lease stops
// its effect before the lease can expire, with a safety margin of a tenth
// of the lease". Schedule: the effect starts, then Redis stops taking
// writes (CLIENT PAUSE WRITE: a BGSAVE stall, a failover in progress) for
// longer than the lease; renewals cannot answer. The effect's context
// must be cancelled with ErrLeaseLost before the lease could expire.
func TestR46PausedRedisStopsEffectInTime(t *testing.T) {
	addr, admin := r46PausedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	s := newStore(t, c, redisstore.WithPrefix(fmt.Sprintf("r46:%d:", time.Now().UnixNano())))
	const lease = 4 * time.Second
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithCompletionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stopped time.Duration
	var cause error
	sent := time.Now()
	_, derr := runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
		Effect: func(ctx context.Context, _ string) (string, error) {
			if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "15000", "WRITE").Err(); err != nil {
				t.Error(err)
			}
			select {
			case <-ctx.Done():
				stopped, cause = time.Since(sent), context.Cause(ctx)
			case <-time.After(12 * time.Second):
				stopped = time.Since(sent)
			}
			return "", ctx.Err()
		}})
	total := time.Since(sent)
	_ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
	t.Logf("effect stopped after %v (cause %v); Do returned after %v: %v", stopped, cause, total, derr)
	if stopped >= lease || !errors.Is(cause, runtime.ErrLeaseLost) {
		t.Errorf("the effect was stopped %v after its claim was sent (lease %v), cause %v: it ran past its lease", stopped, lease, cause)
	}
}

// WithCompletionTimeout "bounds the recording of an outcome after the
// effect returned". Schedule: the effect fails permanently ("declined")
// while Redis takes no writes (CLIENT PAUSE WRITE, 12 s), with a
// completion timeout of 1 s: Do must return within about that second
// after the effect (a store error: the FAILED write could not be made).
// With go-redis's default options (ContextTimeoutEnabled false: I/O
// deadlines come from ReadTimeout, 3 s, and a timed-out command is
// retried) the recording takes several seconds.
func TestR46CompletionTimeoutBoundsRecording(t *testing.T) {
	for _, ctxTimeouts := range []bool{true} { // false: go-redis ignores the deadlines (docs/redisstore.md says to set it)
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			addr, admin := r46PausedRedis(t)
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeouts})
			defer c.Close()
			s := newStore(t, c, redisstore.WithPrefix(fmt.Sprintf("r46:%d:", time.Now().UnixNano())))
			rt, err := runtime.New(s, runtime.WithLease(time.Minute), runtime.WithCompletionTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var returned time.Time
			_, derr := runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
				Effect: func(ctx context.Context, _ string) (string, error) {
					if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "12000", "WRITE").Err(); err != nil {
						t.Error(err)
					}
					returned = time.Now()
					return "", runtime.Permanent(errors.New("declined"))
				}})
			took := time.Since(returned)
			_ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
			t.Logf("recording took %v (completion timeout 1s): %v", took, derr)
			if took > 2500*time.Millisecond {
				t.Errorf("the recording took %v after the effect returned; WithCompletionTimeout(1s) bounds it", took)
			}
		})
	}
}

// The same with the caller's own deadline on the claim: Redis takes no
// writes, a new key's claim (a script) cannot run; the caller's 500 ms
// deadline must end the call (idemhttp: "504 timeout ... the request's own
// deadline passed while it waited ... (or read the store)").
func TestR46CallerDeadlineBoundsClaim(t *testing.T) {
	addr, admin := r46PausedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	s := newStore(t, c, redisstore.WithPrefix(fmt.Sprintf("r46:%d:", time.Now().UnixNano())))
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "12000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, derr := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k", Request: "r",
		Effect: func(ctx context.Context, _ string) (string, error) { return "ok", nil }})
	took := time.Since(start)
	_ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
	t.Logf("Do returned after %v (caller deadline 500ms): %v", took, derr)
	if took > 2500*time.Millisecond {
		t.Errorf("Do returned %v after it was called with a 500ms deadline", took)
	}
}
