package command

import (
	"context"
	"time"

	"example.com/orm/corpus/domain"
)

func (s *Service) RepoDeleteFirst(ctx context.Context, idemKey string, p *domain.Payment) error {
	_ = s.Keys.Del(ctx, idemKey) // want tokenorder
	return s.Gateway.Charge(ctx, p.ID, p.Amount)
}

func (s *Service) GormDeleteFirst(ctx context.Context, key string, p *domain.Payment) error {
	s.Gorm.Where("key = ?", key).Delete(&domain.IdempotencyKey{}) // want tokenorder
	return s.Gateway.Charge(ctx, p.ID, p.Amount)
}

func (s *Service) RedisDeleteFirst(ctx context.Context, key string, p *domain.Payment) error {
	s.RDB.Del(ctx, "idempotency:"+key) // want tokenorder
	return s.Gateway.Charge(ctx, p.ID, p.Amount)
}

func (s *Service) RepoCheckThenAct(ctx context.Context, idemKey string, p *domain.Payment) error {
	if v, _ := s.Keys.Get(ctx, idemKey); v != "" {
		return nil
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil { // want tokenorder
		return err
	}
	return s.Keys.Set(ctx, idemKey, "done")
}

func (s *Service) GormCheckThenAct(ctx context.Context, key string, p *domain.Payment) error {
	var rec domain.IdempotencyKey
	if err := s.Gorm.Where("key = ?", key).First(&rec).Error; err == nil {
		return nil
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil { // want tokenorder
		return err
	}
	return s.Gorm.Save(&domain.IdempotencyKey{Key: key, Status: "done"}).Error
}

func (s *Service) RedisCheckThenAct(ctx context.Context, key string, p *domain.Payment) error {
	if n, _ := s.RDB.Exists(ctx, "idem:"+key).Result(); n > 0 {
		return nil
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil { // want tokenorder
		return err
	}
	return s.RDB.Set(ctx, "idem:"+key, "done", 24*time.Hour).Err()
}

// Claimed claims the key first.
// negative: SET NX before the effect.
func (s *Service) Claimed(ctx context.Context, idemKey string, p *domain.Payment) error {
	ok, err := s.Keys.SetNX(ctx, idemKey, "processing")
	if err != nil || !ok {
		return err
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return err
	}
	return s.Keys.Set(ctx, idemKey, "done")
}

// CleanupAfter deletes the key once the outcome is known.
// negative: the delete follows the effect.
func (s *Service) CleanupAfter(ctx context.Context, idemKey string, p *domain.Payment) error {
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return err
	}
	return s.Keys.Del(ctx, idemKey)
}

// CachedProfile reads a read-through cache, not a token.
// negative: a read-only cache.
func (s *Service) CachedProfile(ctx context.Context, userID string, p *domain.Payment) error {
	if v, _ := s.Cache.Get(ctx, "profile:"+userID); v != "" {
		return nil
	}
	if err := s.Gateway.Charge(ctx, p.ID, p.Amount); err != nil {
		return err
	}
	return s.Cache.Set(ctx, "profile:"+userID, "x")
}
