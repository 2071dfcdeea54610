// Package bad checks an idempotency key, then sets it without NX.
package bad

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

func Claim(ctx context.Context, rdb *redis.Client, key string) error {
	if _, err := rdb.Get(ctx, "idem:"+key).Result(); err == redis.Nil {
		return rdb.Set(ctx, "idem:"+key, "PROCESSING", time.Hour).Err()
	}
	return nil
}
