// Package teststores gives adapter tests (idemhttp, idemgrpc) the stores to
// run their scenarios on: memory always, PostgreSQL and Redis from the
// servers scripts/test.sh starts (see internal/testenv: skipped locally
// when unset, failed under CI). Each PostgreSQL store has a schema of its
// own (so that no other test's sweeper or reconciler, in this package or
// another running at the same time, touches its records); each Redis store
// a unique key prefix.
package teststores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/redisstore"
)

// Store is a named store constructor.
type Store struct {
	Name string
	New  func(t testing.TB) runtime.Store
}

// All returns memory, PostgreSQL, Redis standalone and Redis Cluster.
func All() []Store {
	return []Store{{"memory", Memory}, {"postgres", Postgres}, {"redis", Redis}, {"redis-cluster", RedisCluster}}
}

// Memory returns a new memory store.
func Memory(testing.TB) runtime.Store { return memstore.New() }

// Postgres returns a store on the test server, in a schema of its own
// (dropped when the test ends), its table migrated.
func Postgres(t testing.TB) runtime.Store {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	admin, err := adminPool(ctx, dsn)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	schema := "idemtest_" + Unique()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	})
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	return pgstore.New(pool)
}

// admins holds the test process's pool for creating and dropping the
// stores' schemas, one per server URL, never closed. A pool per store for
// that (opened to create the schema, again to drop it) cost PostgreSQL two
// backends per store: most of the sessions of a conformance run, each a
// process to start and tear down.
var admins = struct {
	sync.Mutex
	pools map[string]*pgxpool.Pool
}{pools: map[string]*pgxpool.Pool{}}

func adminPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	admins.Lock()
	defer admins.Unlock()
	if p := admins.pools[dsn]; p != nil {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	admins.pools[dsn] = p
	return p, nil
}

// Redis returns a store on the standalone test server under a fresh prefix.
func Redis(t testing.TB) runtime.Store {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatalf("%s: %v", testenv.RedisURLVar, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.WithPrefix("idemtest-"+Unique()+":"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// RedisCluster returns a store on the test Redis Cluster under a fresh
// prefix.
func RedisCluster(t testing.TB) runtime.Store {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.WithPrefix("idemtest-"+Unique()+":"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Unique returns a random name for scopes and prefixes.
func Unique() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SuccessDown wraps a store so that every SUCCESS write fails while Down
// is set (a store that takes claims and reads but cannot record outcomes:
// the ErrNotRecorded schedules). Failed counts the writes it refused.
type SuccessDown struct {
	runtime.Store
	Down   atomic.Bool
	Failed atomic.Int32
}

// Transition refuses a SUCCESS write while s.Down is set.
func (s *SuccessDown) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	return refuse(ctx, s.Store, p, runtime.StateSuccess, &s.Down, &s.Failed, nil)
}

// OutcomeDown wraps a store so that every write of the outcome To (FAILED,
// UNKNOWN) fails while Down is set (an outcome that cannot be recorded).
// Failed counts the writes it refused; Errored counts the writes of To it
// passed to the store that failed all the same (a completion timeout on a
// loaded machine).
type OutcomeDown struct {
	runtime.Store
	To      runtime.State
	Down    atomic.Bool
	Failed  atomic.Int32
	Errored atomic.Int32
}

// Transition refuses a write of s.To while s.Down is set.
func (s *OutcomeDown) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	return refuse(ctx, s.Store, p, s.To, &s.Down, &s.Failed, &s.Errored)
}

// ErrWritesDown is the error of a write SuccessDown or OutcomeDown refused.
var ErrWritesDown = errors.New("teststores: the store refuses these writes")

func refuse(ctx context.Context, s runtime.Store, p runtime.TransitionParams, to runtime.State, down *atomic.Bool, failed, errored *atomic.Int32) (int64, error) {
	if p.To == to && down.Load() {
		failed.Add(1)
		return 0, fmt.Errorf("%w: %s writes are down", ErrWritesDown, to)
	}
	v, err := s.Transition(ctx, p)
	if err != nil && p.To == to && errored != nil {
		errored.Add(1)
	}
	return v, err
}

// NoRenewals wraps a store so that it refuses every lease renewal: the
// lease rule stops the effect of every call on it before its lease can
// expire.
type NoRenewals struct{ runtime.Store }

// Renew refuses the renewal.
func (NoRenewals) Renew(context.Context, runtime.RenewParams) (time.Time, error) {
	return time.Time{}, errors.New("teststores: renewal refused")
}

// SlowClaims wraps a store whose claims take until their context ends (a
// loaded server): what a claim in flight sees when its caller's context
// ends.
type SlowClaims struct{ runtime.Store }

// Claim waits for ctx to end and returns its error.
func (SlowClaims) Claim(ctx context.Context, _ runtime.ClaimParams) (runtime.ClaimResult, error) {
	<-ctx.Done()
	return runtime.ClaimResult{}, ctx.Err()
}
