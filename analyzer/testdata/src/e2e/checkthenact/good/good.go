// Package good claims an idempotency key with SET NX.
package good

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

func Claim(ctx context.Context, rdb *redis.Client, key string) error {
	ok, err := rdb.SetNX(ctx, "idem:"+key, "PROCESSING", time.Hour).Result()
	if err == nil && !ok {
		return errors.New("duplicate")
	}
	return err
}
