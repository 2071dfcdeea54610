package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/redisstore"
)

// Environment variables naming the store when no store flag is given.
const (
	envPostgres     = "IDEM_POSTGRES_URL"
	envRedis        = "IDEM_REDIS_URL"
	envRedisCluster = "IDEM_REDIS_CLUSTER_ADDRS"
)

// storeFlags are the store flags every command has.
type storeFlags struct {
	postgres, redisURL, cluster, prefix string
	buckets                             int
	timeout                             time.Duration
}

func (sf *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&sf.postgres, "postgres", "", "PostgreSQL `DSN` of the service's records (env "+envPostgres+")")
	fs.StringVar(&sf.redisURL, "redis", "", "Redis `URL`, redis://[user:pass@]host:port[/db] (env "+envRedis+")")
	fs.StringVar(&sf.cluster, "redis-cluster", "", "Redis Cluster seed addresses, `host:port,...`, or a URL redis://user:pass@host:port?addr=host:port&addr=... (env "+envRedisCluster+")")
	fs.StringVar(&sf.prefix, "redis-prefix", redisstore.DefaultPrefix, "key `prefix` of the Redis store: the service's redisstore.WithPrefix")
	fs.IntVar(&sf.buckets, "redis-buckets", redisstore.DefaultBuckets, "bucket `count` of the Redis store: the service's redisstore.WithBuckets")
	fs.DurationVar(&sf.timeout, "timeout", 30*time.Second, "bound on the whole command's store calls")
}

// storeSpec is a validated store choice.
type storeSpec struct {
	kind   string // "postgres", "redis" or "redis-cluster"
	target string // DSN or URL
	addrs  []string
	// clusterURL is set when -redis-cluster was a URL (with credentials).
	clusterURL *redis.ClusterOptions
	prefix     string
	buckets    int
	timeout    time.Duration
}

// spec chooses the store: the store flags given, else the environment;
// exactly one.
func (sf *storeFlags) spec(fs *flag.FlagSet, env func(string) string) (storeSpec, error) {
	type choice struct{ kind, value, from string }
	var chosen []choice
	for _, c := range []struct{ flag, env, value string }{
		{"postgres", envPostgres, sf.postgres}, {"redis", envRedis, sf.redisURL}, {"redis-cluster", envRedisCluster, sf.cluster},
	} {
		if isSet(fs, c.flag) {
			chosen = append(chosen, choice{c.flag, c.value, "-" + c.flag})
		}
	}
	if len(chosen) == 0 {
		for _, c := range []struct{ kind, env string }{{"postgres", envPostgres}, {"redis", envRedis}, {"redis-cluster", envRedisCluster}} {
			if v := env(c.env); v != "" {
				chosen = append(chosen, choice{c.kind, v, c.env})
			}
		}
	}
	switch len(chosen) {
	case 0:
		return storeSpec{}, usagef("no store: give -postgres DSN, -redis URL or -redis-cluster host:port,... (or set %s, %s or %s)",
			envPostgres, envRedis, envRedisCluster)
	case 1:
	default:
		names := make([]string, len(chosen))
		for i, c := range chosen {
			names[i] = c.from
		}
		return storeSpec{}, usagef("%s name %d stores: give exactly one", strings.Join(names, " and "), len(chosen))
	}
	c := chosen[0]
	s := storeSpec{kind: c.kind, target: strings.TrimSpace(c.value), prefix: sf.prefix, buckets: sf.buckets, timeout: sf.timeout}
	if s.target == "" {
		return storeSpec{}, usagef("%s is empty", c.from)
	}
	if sf.timeout <= 0 {
		return storeSpec{}, usagef("-timeout must be positive, got %v", sf.timeout)
	}
	switch s.kind {
	case "postgres":
		if isSet(fs, "redis-prefix") || isSet(fs, "redis-buckets") {
			return storeSpec{}, usagef("-redis-prefix and -redis-buckets are for a Redis store, not PostgreSQL")
		}
		if _, err := pgxpool.ParseConfig(s.target); err != nil {
			return storeSpec{}, usagef("%s: not a PostgreSQL DSN: %v", c.from, err)
		}
	case "redis":
		if _, err := redis.ParseURL(s.target); err != nil {
			return storeSpec{}, usagef("%s: not a Redis URL: %v", c.from, err)
		}
	case "redis-cluster":
		if strings.HasPrefix(s.target, "redis://") || strings.HasPrefix(s.target, "rediss://") {
			opt, err := redis.ParseClusterURL(s.target)
			if err != nil {
				return storeSpec{}, usagef("%s: not a Redis Cluster URL: %v", c.from, err)
			}
			s.clusterURL = opt
			break
		}
		for a := range strings.SplitSeq(s.target, ",") {
			a = strings.TrimSpace(a)
			if a == "" || strings.Contains(a, "://") || !strings.Contains(a, ":") {
				return storeSpec{}, usagef("%s: want host:port,host:port,...; got %q", c.from, a)
			}
			s.addrs = append(s.addrs, a)
		}
	}
	if s.kind != "postgres" {
		// The store's own checks, on a store that is never used.
		for _, o := range []redisstore.Option{redisstore.WithPrefix(s.prefix), redisstore.WithBuckets(s.buckets)} {
			if err := o(&redisstore.Store{}); err != nil {
				return storeSpec{}, usageError{err}
			}
		}
	}
	return s, nil
}

// operatorStore is what idemctl needs of a store.
type operatorStore interface {
	runtime.Store
	runtime.Lister
}

// open connects to the store and checks that it answers.
func (s storeSpec) open(ctx context.Context) (operatorStore, func(), error) {
	switch s.kind {
	case "postgres":
		pool, err := pgxpool.New(ctx, s.target)
		if err != nil {
			return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
		}
		return pgstore.New(pool), pool.Close, nil
	case "redis", "redis-cluster":
		var c redis.UniversalClient
		if s.kind == "redis" {
			opt, err := redis.ParseURL(s.target)
			if err != nil {
				return nil, nil, fmt.Errorf("redis URL: %w", err)
			}
			opt.ContextTimeoutEnabled = true // so that -timeout bounds the store calls
			c = redis.NewClient(opt)
		} else {
			opt := s.clusterURL
			if opt == nil {
				opt = &redis.ClusterOptions{Addrs: s.addrs}
			}
			opt.ContextTimeoutEnabled = true
			c = redis.NewClusterClient(opt)
		}
		closeFn := func() { _ = c.Close() }
		if err := c.Ping(ctx).Err(); err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("connecting to Redis: %w", err)
		}
		st, err := redisstore.New(c, redisstore.WithPrefix(s.prefix), redisstore.WithBuckets(s.buckets))
		if err != nil {
			closeFn()
			return nil, nil, err
		}
		return st, closeFn, nil
	}
	return nil, nil, errors.New("no store")
}
