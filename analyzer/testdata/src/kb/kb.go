// Package kb holds helpers known to k through facts.
package kb

import (
	"context"
	"net/http"

	"kc"

	"github.com/redis/go-redis/v9"
)

// Charge asks the gateway to charge.
func Charge(ctx context.Context, id string) error {
	req, _ := http.NewRequestWithContext(ctx, "POST", "https://pay.example/charge?id="+id, nil)
	return kc.Post(req)
}

// ForgetToken deletes the idempotency token.
func ForgetToken(ctx context.Context, rdb *redis.Client, key string) error {
	return rdb.Del(ctx, "idem:"+key).Err()
}

// Claim claims the idempotency token atomically.
func Claim(ctx context.Context, rdb *redis.Client, key string) (bool, error) {
	return rdb.SetNX(ctx, "idem:"+key, "PROCESSING", 0).Result()
}
