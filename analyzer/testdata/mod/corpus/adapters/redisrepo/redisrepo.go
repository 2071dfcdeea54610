// Package redisrepo implements domain.KeyRepo and domain.Cache with go-redis.
package redisrepo

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

type Keys struct{ RDB *redis.Client }

func (k *Keys) Get(ctx context.Context, key string) (string, error) {
	return k.RDB.Get(ctx, "idem:"+key).Result()
}

func (k *Keys) Set(ctx context.Context, key, val string) error {
	return k.RDB.Set(ctx, "idem:"+key, val, 24*time.Hour).Err()
}

func (k *Keys) SetNX(ctx context.Context, key, val string) (bool, error) {
	return k.RDB.SetNX(ctx, "idem:"+key, val, 24*time.Hour).Result()
}

func (k *Keys) Del(ctx context.Context, key string) error {
	return k.RDB.Del(ctx, "idem:"+key).Err()
}

type Cache struct{ RDB *redis.Client }

func (c *Cache) Get(ctx context.Context, key string) (string, error) {
	return c.RDB.Get(ctx, "cache:"+key).Result()
}

func (c *Cache) Set(ctx context.Context, key, val string) error {
	return c.RDB.Set(ctx, "cache:"+key, val, time.Minute).Err()
}
