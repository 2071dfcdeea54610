// Package ormtok: idempotency tokens kept through a repository interface
// or gorm.
package ormtok

import (
	"context"

	"gorm.io/gorm"

	"example.com/orm/netx"
)

// IdempotencyKey is the token table's row.
type IdempotencyKey struct {
	Key    string
	Status string
}

// TokenRepo is a Redis-backed repository.
type TokenRepo interface {
	Get(ctx context.Context, key string) (string, error)
	Set(ctx context.Context, key, val string) error
	SetNX(ctx context.Context, key, val string) (bool, error)
	Del(ctx context.Context, key string) error
}

func DeleteFirst(ctx context.Context, repo TokenRepo, idemKey, id string) error {
	_ = repo.Del(ctx, idemKey) // want `idempotency token is deleted`
	return netx.Charge(ctx, id, 10)
}

func GormDeleteFirst(ctx context.Context, db *gorm.DB, key, id string) error {
	db.Where("key = ?", key).Delete(&IdempotencyKey{}) // want `idempotency token is deleted`
	return netx.Charge(ctx, id, 10)
}

func RepoCheckThenAct(ctx context.Context, repo TokenRepo, idemKey, id string) error {
	if v, _ := repo.Get(ctx, idemKey); v != "" {
		return nil
	}
	if err := netx.Charge(ctx, id, 10); err != nil { // want `after a non-atomic check`
		return err
	}
	return repo.Set(ctx, idemKey, "done")
}

func GormCheckThenAct(ctx context.Context, db *gorm.DB, key, id string) error {
	var rec IdempotencyKey
	if err := db.Where("key = ?", key).First(&rec).Error; err == nil {
		return nil
	}
	if err := netx.Charge(ctx, id, 10); err != nil { // want `after a non-atomic check`
		return err
	}
	return db.Save(&IdempotencyKey{Key: key, Status: "done"}).Error
}

// Claimed claims first: silent.
func Claimed(ctx context.Context, repo TokenRepo, idemKey, id string) error {
	ok, err := repo.SetNX(ctx, idemKey, "processing")
	if err != nil || !ok {
		return err
	}
	if err := netx.Charge(ctx, id, 10); err != nil {
		return err
	}
	return repo.Set(ctx, idemKey, "done")
}

// CleanupAfter deletes after the effect: silent.
func CleanupAfter(ctx context.Context, repo TokenRepo, idemKey, id string) error {
	if err := netx.Charge(ctx, id, 10); err != nil {
		return err
	}
	return repo.Del(ctx, idemKey)
}

// Cache reads a cache, not a token: silent.
func Cache(ctx context.Context, repo TokenRepo, userID, id string) error {
	if v, _ := repo.Get(ctx, "profile:"+userID); v != "" {
		return nil
	}
	if err := netx.Charge(ctx, id, 10); err != nil {
		return err
	}
	return repo.Set(ctx, "profile:"+userID, "x")
}
