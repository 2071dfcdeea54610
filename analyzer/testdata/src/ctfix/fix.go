// Package ctfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package ctfix

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

func claim(ctx context.Context, rdb *redis.Client, key string) error {
	if rdb.Exists(ctx, "idem:"+key).Val() == 0 {
		rdb.Set(ctx, "idem:"+key, 1, time.Hour) //idemlint:ignore checkthenct single consumer per key // want `idemlint:ignore names no rule "checkthenct"; did you mean checkthenact\?` `writes the idempotency key`
	}
	return nil
}
