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
	"sync/atomic"
	"testing"

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
	schema := "idemtest_" + Unique()
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	defer admin.Close()
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
		if admin, err := pgxpool.NewWithConfig(context.Background(), cfg.Copy()); err == nil {
			_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			admin.Close()
		}
	})
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	return pgstore.New(pool)
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
	if p.To == runtime.StateSuccess && s.Down.Load() {
		s.Failed.Add(1)
		return 0, errors.New("teststores: SUCCESS writes are down")
	}
	return s.Store.Transition(ctx, p)
}
