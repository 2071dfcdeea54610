// Package tk holds timeoutfail's cases of idempotency token deletes behind
// generic names: a helper named for what it deletes, a key built by a
// function that builds idempotency keys, and reads whose errors reach them.
package tk

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"tc"
)

// KeyStore is the service's key repository: its Del says nothing of what
// it deletes.
type KeyStore interface {
	Del(ctx context.Context, key string) error
}

// Cache reads through Redis.
type Cache struct{ rdb *redis.Client }

func (c *Cache) Load(ctx context.Context, key string) (map[string]string, error) {
	return c.rdb.HGetAll(ctx, key).Result()
}

func (c *Cache) Get(ctx context.Context, key string) (string, error) {
	return c.rdb.Get(ctx, key).Result()
}

type Handler struct {
	cache *Cache
	keys  KeyStore
}

// deleteIdempotencyKey releases the key: its name says what it deletes,
// the key's name does not.
func (h *Handler) deleteIdempotencyKey(ctx context.Context, internalKey string) error {
	return h.keys.Del(ctx, internalKey)
}

// buildKey builds idempotency keys.
func buildKey(parts ...string) string { return "idempotency:" + strings.Join(parts, ":") }

// 1. a charge's error reaches the helper named for the delete.
func (h *Handler) charge(ctx context.Context, key string) error {
	if err := tc.Charge(ctx, key); err != nil {
		h.deleteIdempotencyKey(ctx, key) // want `the error of tc\.Charge .* reaches an action at \S+ that deletes the idempotency token`
		return err
	}
	return nil
}

// 2. a charge's error reaches a generic delete of a key built by buildKey.
func (h *Handler) chargeBuilt(ctx context.Context, user, key string) error {
	internalKey := buildKey(user, key)
	if err := tc.Charge(ctx, key); err != nil {
		h.keys.Del(ctx, internalKey) // want `the error of tc\.Charge .* reaches an action at \S+ that deletes the idempotency token`
		return err
	}
	return nil
}

// 2'. the same generic delete of a key that is not an idempotency key.
func (h *Handler) chargeSession(ctx context.Context, session string) error {
	if err := tc.Charge(ctx, session); err != nil {
		h.keys.Del(ctx, "session:"+session)
		return err
	}
	return nil
}

// 1'. a cache read's error reaches the delete: a read has no effect that
// a retry would repeat.
func (h *Handler) cached(ctx context.Context, key string) error {
	if _, err := h.cache.Load(ctx, key); err != nil {
		h.deleteIdempotencyKey(ctx, key)
		return err
	}
	if _, err := h.cache.Get(ctx, key); err != nil {
		h.deleteIdempotencyKey(ctx, key)
		return err
	}
	return nil
}
