// Package tokenorderfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package tokenorderfix

import (
	"context"

	"kb"

	"github.com/redis/go-redis/v9"
)

func charge(ctx context.Context, rdb *redis.Client, key string) error {
	rdb.Del(ctx, "idem:"+key) //idemlint:ignore tokenordr the gateway dedups on the key // want `idemlint:ignore names no rule "tokenordr"; did you mean tokenorder\?` `the idempotency token is deleted`
	return kb.Charge(ctx, key)
}
