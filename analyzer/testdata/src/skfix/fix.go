// Package skfix has a misspelled suppression directive; the suggested fix
// corrects the rule name.
package skfix

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

func claim(ctx context.Context, rdb *redis.Client) error {
	return rdb.SetNX(ctx, "idem:"+uuid.NewString(), 1, time.Hour).Err() //idemlint:ignore serverkee a load test // want `idemlint:ignore names no rule "serverkee"; did you mean serverkey\?` `the dedup key of`
}
