package stall

import (
	"context"
	"time"

	"github.com/idemkit/idem/runtime"
)

// TimedRenew is a store whose renewals note how long each took (failed
// ones too) in W: a renewal the store answers late (a starved server)
// loses a lease as a stalled process does, so it counts as a stall.
type TimedRenew struct {
	runtime.Store
	W *Watch
}

// Renew renews through the store and notes the call's duration.
func (s TimedRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	start := time.Now()
	until, err := s.Store.Renew(ctx, p)
	s.W.Note(time.Since(start))
	return until, err
}
