// Package bad charges through the inner implementation.
package bad

import (
	"context"

	"bpimpl"
	"bpsvc"
)

func Charge(ctx context.Context, s *bpimpl.Service, key string) error {
	_, err := s.Charge(ctx, bpsvc.ChargeRequest{IdempotencyKey: key, Amount: 100})
	return err
}
