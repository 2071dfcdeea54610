package sk

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

type Msg struct {
	ID    string
	Topic string
}

// 14. A Redis dedup key built from a fresh uuid.
func dedupRedis(ctx context.Context, rdb *redis.Client) (bool, error) {
	return rdb.SetNX(ctx, "idem:"+uuid.NewString(), "PROCESSING", time.Hour).Result() // want `the dedup key of \(redis.cmdable\).SetNX is built from uuid.NewString\(\) at dedup\.go:21:32, minted on the server`
}

// A lock's owner token is a fresh value, its key is the order's.
func lockOrder(ctx context.Context, rdb *redis.Client, orderID string) (bool, error) {
	return rdb.SetNX(ctx, "idem:lock:"+orderID, uuid.NewString(), time.Minute).Result()
}

// 15. Through a variable, rand.
func dedupMsg(ctx context.Context, rdb *redis.Client, m Msg) (int64, error) {
	dedupKey := fmt.Sprintf("dedup:%s:%d", m.Topic, rand.Int63())
	return rdb.Exists(ctx, dedupKey).Result() // want `the dedup key of \(redis.cmdable\).Exists is built from rand.Int63\(\)`
}

func dedupMsgID(ctx context.Context, rdb *redis.Client, m Msg) (int64, error) {
	dedupKey := fmt.Sprintf("dedup:%s:%s", m.Topic, m.ID)
	return rdb.Exists(ctx, dedupKey).Result()
}

// 16. The key column of a dedup table.
func dedupSQL(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, "INSERT INTO idempotency_keys (key, state) VALUES ($1, 'PROCESSING') ON CONFLICT DO NOTHING", uuid.NewString()) // want `\(\*sql.DB\).ExecContext inserts key, the key column of a dedup table, from uuid.NewString\(\)`
	return err
}

// A fresh surrogate id beside the client's key is fine.
func dedupSQLSurrogate(ctx context.Context, db *sql.DB, key string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO idempotency_keys (id, key) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", uuid.NewString(), key)
	return err
}

// A key picked among a few (a load test's key space) is not minted.
func pickKey(ctx context.Context, rdb *redis.Client, rng *rand.Rand) (bool, error) {
	return rdb.SetNX(ctx, fmt.Sprintf("idem:k%d", rng.Intn(100)), 1, time.Hour).Result()
}

// IdemRecord is this service's own idempotency record.
type IdemRecord struct {
	IdempotencyKey string
	Path           string
}

// 17. The key field of the service's own record.
func initRequest(headerKey, path string) *IdemRecord {
	return &IdemRecord{IdempotencyKey: uuid.New().String(), Path: path} // want `IdemRecord.IdempotencyKey, the idempotency key of this service's own record, is minted on the server \(uuid.New\(\) at dedup\.go:65:37\)`
}

func initRequestClient(headerKey, path string) *IdemRecord {
	return &IdemRecord{IdempotencyKey: headerKey, Path: path}
}
