// Package good charges through the generated wrapper.
package good

import (
	"context"

	"bpimpl"
	"bpsvc"

	"github.com/idemkit/idem/runtime"
)

func Charge(ctx context.Context, s *bpimpl.Service, rt *runtime.Runtime, key string) error {
	_, err := bpsvc.NewIdempotentPayments(s, rt).Charge(ctx, bpsvc.ChargeRequest{IdempotencyKey: key, Amount: 100})
	return err
}
