// Package teststores gives adapter tests (idemhttp, idemgrpc) the stores to
// run their scenarios on: memory always, PostgreSQL and Redis from the
// servers scripts/test.sh starts (see internal/testenv: skipped locally
// when unset, failed under CI). Each PostgreSQL or Redis store is isolated
// by the caller's unique scopes; the Redis one also by a unique key prefix.
package teststores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Postgres returns a store on the test server, its table migrated.
func Postgres(t testing.TB) runtime.Store {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("%s: %v", testenv.PostgresURLVar, err)
	}
	t.Cleanup(pool.Close)
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
