package ct

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

const ttl = 24 * time.Hour

// 15. Get, then Set when redis.Nil.
func redisClaim(ctx context.Context, rdb *redis.Client, key string) error {
	_, err := rdb.Get(ctx, "idem:"+key).Result()
	if err == redis.Nil {
		return rdb.Set(ctx, "idem:"+key, "PROCESSING", ttl).Err() // want `\(redis.cmdable\).Set writes the idempotency key "idem:" \+ key without NX on the not-found path of a plain read of it \(\(redis.cmdable\).Get at redis.go:15:`
	}
	return err
}

func redisClaimNX(ctx context.Context, rdb *redis.Client, key string) error {
	ok, err := rdb.SetNX(ctx, "idem:"+key, "PROCESSING", ttl).Result()
	if err == nil && !ok {
		return errDuplicate
	}
	return err
}

// 16. Exists > 0 returns; the Set below is on the not-found path.
func redisExists(ctx context.Context, rdb *redis.Client, orderID string) error {
	idemKey := "order:idempotency:" + orderID
	n, err := rdb.Exists(ctx, idemKey).Result()
	if err != nil {
		return err
	}
	if n > 0 {
		return errDuplicate
	}
	return rdb.Set(ctx, idemKey, 1, ttl).Err() // want `\(redis.cmdable\).Set writes the idempotency key idemKey without NX`
}

// A cache, not an idempotency key: cache-aside is fine.
func cacheAside(ctx context.Context, rdb *redis.Client, userID string) (string, error) {
	v, err := rdb.Get(ctx, "user:"+userID).Result()
	if err == redis.Nil {
		v = "loaded"
		err = rdb.Set(ctx, "user:"+userID, v, time.Minute).Err()
	}
	return v, err
}

// 17. Inline check in the condition, key in a variable.
func redisInline(ctx context.Context, rdb *redis.Client, id string) error {
	k := "dedup:" + id
	if rdb.Exists(ctx, k).Val() == 0 {
		rdb.Set(ctx, k, "1", ttl) // want `\(redis.cmdable\).Set writes the idempotency key k without NX`
	}
	return nil
}

func redisInlineArgs(ctx context.Context, rdb *redis.Client, id string) error {
	k := "dedup:" + id
	if rdb.Exists(ctx, k).Val() == 0 {
		rdb.SetArgs(ctx, k, "1", redis.SetArgs{Mode: "NX", TTL: ttl})
	}
	return nil
}

// 18. HGet, then HSet.
func redisHash(ctx context.Context, rdb *redis.Client, key string) error {
	st, err := rdb.HGet(ctx, "idempotency:"+key, "state").Result()
	if errors.Is(err, redis.Nil) {
		return rdb.HSet(ctx, "idempotency:"+key, "state", "PROCESSING").Err() // want `\(redis.cmdable\).HSet writes the idempotency key "idempotency:" \+ key`
	}
	_ = st
	return err
}

func redisHashLua(ctx context.Context, rdb *redis.Client, key string) error {
	return rdb.Eval(ctx, `if redis.call('HSETNX', KEYS[1], 'state', 'PROCESSING') == 1 then return 1 end return 0`, []string{"idempotency:" + key}).Err()
}

// 19. err != nil counts as not found.
func redisNonce(ctx context.Context, rdb *redis.Client, nonce string) error {
	if _, err := rdb.Get(ctx, "nonce:"+nonce).Result(); err != nil {
		return rdb.Set(ctx, "nonce:"+nonce, 1, ttl).Err() // want `\(redis.cmdable\).Set writes the idempotency key "nonce:" \+ nonce`
	}
	return errDuplicate
}

// The Set on the found path (err == nil) refreshes the key: no claim.
func redisNonceRefresh(ctx context.Context, rdb *redis.Client, nonce string) error {
	if _, err := rdb.Get(ctx, "nonce:"+nonce).Result(); err == nil {
		return rdb.Set(ctx, "nonce:"+nonce, 1, ttl).Err()
	}
	return nil
}

// Inside WATCH the EXEC fails when the key changed since the Get: atomic.
func redisWatch(ctx context.Context, rdb *redis.Client, key string) error {
	return rdb.Watch(ctx, func(tx *redis.Tx) error {
		if _, err := tx.Get(ctx, "idem:"+key).Result(); err != redis.Nil {
			return err
		}
		tx.Set(ctx, "idem:"+key, 1, ttl)
		return nil
	}, "idem:"+key)
}

// The write inside the inline check's body reads a variable of its own.
func redisInlineOwnVar(ctx context.Context, rdb *redis.Client, id string) error {
	k := "dedup:" + id
	if rdb.Exists(ctx, k).Val() > 0 {
		err := rdb.Get(ctx, "other").Err()
		if err != nil {
			return rdb.Set(ctx, k, "refresh", ttl).Err()
		}
	}
	return nil
}
