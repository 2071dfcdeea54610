package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/redisstore"
)

type r36Req struct {
	Amount int `json:"amount"`
}

// r36Big is a response over the store's limit; its Cut form is small, or
// Cut panics.
type r36Big struct {
	ID     string `json:"id"`
	Blob   string `json:"blob"`
	Short  bool   `json:"short"`
	PanicC bool   `json:"-"`
}

func (b r36Big) Cut() r36Big {
	if b.PanicC {
		panic("r36: Cut panicked")
	}
	return r36Big{ID: b.ID, Short: true}
}

// r36Plain is r36Big without a Cutter.
type r36Plain struct {
	ID   string `json:"id"`
	Blob string `json:"blob"`
}

func r36Stores(t *testing.T, limit int) map[string]idem.Store {
	out := map[string]idem.Store{}
	// PostgreSQL, in a schema of its own.
	dsn := testenv.PostgresURL(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := "idemtest_r36_" + teststores.Unique()
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	})
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	out["postgres"] = pgstore.New(pool, pgstore.WithMaxRecordBytes(limit))
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	rs, err := redisstore.New(c, redisstore.WithPrefix("idemtest-r36-"+teststores.Unique()+":"), redisstore.WithMaxRecordBytes(limit))
	if err != nil {
		t.Fatal(err)
	}
	out["redis"] = rs
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = cc.Close() })
	rcs, err := redisstore.New(cc, redisstore.WithPrefix("idemtest-r36-"+teststores.Unique()+":"), redisstore.WithMaxRecordBytes(limit))
	if err != nil {
		t.Fatal(err)
	}
	out["redis-cluster"] = rcs
	return out
}

// TestR36ReconcilerSizeRuleOnQueriedResponse (held): a call's effect times
// out (UNKNOWN); the reconciler's query answers "happened" with a response
// over the store's limit. With a Cutter the Cut form is recorded and a
// duplicate gets it; with a Cut that panics, or no Cutter, SUCCESS is
// recorded without the response and a duplicate gets ErrNotReplayable;
// never a run again.
func TestR36ReconcilerSizeRuleOnQueriedResponse(t *testing.T) {
	const limit = 4096
	blob := strings.Repeat("x", 3*limit)
	for name, store := range r36Stores(t, limit) {
		for _, how := range []string{"cutter", "cut-panics", "no-cutter"} {
			t.Run(how+"/"+name, func(t *testing.T) {
				testenv.Within(t, 15*time.Second, func() {
					ctx := context.Background()
					rt, err := idem.New(store)
					if err != nil {
						t.Fatal(err)
					}
					op := "R36.Big." + how
					key := "k-r36-" + teststores.Unique()
					timeout := func(ctx context.Context, _ r36Req) error {
						return fmt.Errorf("downstream: %w", context.DeadlineExceeded)
					}
					var ran bool
					var retryErr error
					var got any
					if how == "no-cutter" {
						if err := idem.Register(rt, op, func(ctx context.Context, req r36Req) (r36Plain, idem.Outcome, error) {
							return r36Plain{ID: "q1", Blob: blob}, idem.OutcomeSucceeded, nil
						}, idem.QueryOptions{}); err != nil {
							t.Fatal(err)
						}
						call := func(eff func(context.Context, r36Req) (r36Plain, error)) (r36Plain, error) {
							return idem.Do(ctx, rt, idem.Call[r36Req, r36Plain]{Operation: op, Key: key, Request: r36Req{Amount: 1}, Effect: eff})
						}
						if _, err := call(func(ctx context.Context, r r36Req) (r36Plain, error) { return r36Plain{}, timeout(ctx, r) }); !errors.Is(err, context.DeadlineExceeded) {
							t.Fatalf("first call: %v", err)
						}
						reconcileR36(t, rt)
						got, retryErr = call(func(ctx context.Context, r r36Req) (r36Plain, error) { ran = true; return r36Plain{}, nil })
					} else {
						if err := idem.Register(rt, op, func(ctx context.Context, req r36Req) (r36Big, idem.Outcome, error) {
							return r36Big{ID: "q1", Blob: blob, PanicC: how == "cut-panics"}, idem.OutcomeSucceeded, nil
						}, idem.QueryOptions{}); err != nil {
							t.Fatal(err)
						}
						call := func(eff func(context.Context, r36Req) (r36Big, error)) (r36Big, error) {
							return idem.Do(ctx, rt, idem.Call[r36Req, r36Big]{Operation: op, Key: key, Request: r36Req{Amount: 1}, Effect: eff})
						}
						if _, err := call(func(ctx context.Context, r r36Req) (r36Big, error) { return r36Big{}, timeout(ctx, r) }); !errors.Is(err, context.DeadlineExceeded) {
							t.Fatalf("first call: %v", err)
						}
						reconcileR36(t, rt)
						got, retryErr = call(func(ctx context.Context, r r36Req) (r36Big, error) { ran = true; return r36Big{}, nil })
					}
					rec, err := store.Get(ctx, idem.Identity{Operation: op, Key: key})
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("record %s omitted=%v note=%q; retry: %+v, %v", rec.State, rec.ResponseOmitted, rec.Note, got, retryErr)
					if ran {
						t.Errorf("the retry ran the effect again")
					}
					switch how {
					case "cutter":
						if b, _ := got.(r36Big); retryErr != nil || b.ID != "q1" || !b.Short {
							t.Errorf("retry: %+v, %v; want the Cut form", got, retryErr)
						}
					default:
						if !errors.Is(retryErr, idem.ErrNotReplayable) {
							t.Errorf("retry: %+v, %v; want ErrNotReplayable", got, retryErr)
						}
					}
				})
			})
		}
	}
}

func reconcileR36(t *testing.T, rt *idem.Runtime) {
	t.Helper()
	rec, err := idem.NewReconciler(rt, idem.ReconcileMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.RunOnce(context.Background()); err != nil {
		t.Errorf("reconcile: %v", err)
	}
}
