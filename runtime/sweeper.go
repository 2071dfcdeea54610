package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sweeper deletes finished (SUCCESS and FAILED) records whose TTL passed, in
// bounded batches, through the runtime's store. It never deletes PROCESSING
// or UNKNOWN records. Stores that expire records themselves (Redis) have
// little or nothing to sweep.
type Sweeper struct {
	rt       *Runtime
	batch    int
	interval time.Duration
}

// SweeperOption configures a [Sweeper].
type SweeperOption func(*Sweeper) error

// SweepBatch sets how many records one store call deletes at most (default
// 1000): small batches keep locks short.
func SweepBatch(n int) SweeperOption {
	return func(s *Sweeper) error {
		if n <= 0 {
			return fmt.Errorf("idem: sweep batch must be positive, got %d", n)
		}
		s.batch = n
		return nil
	}
}

// SweepInterval sets how long Run sleeps between passes (default 1m).
func SweepInterval(d time.Duration) SweeperOption {
	return func(s *Sweeper) error {
		if d <= 0 {
			return fmt.Errorf("idem: sweep interval must be positive, got %v", d)
		}
		s.interval = d
		return nil
	}
}

// NewSweeper returns a sweeper on rt's store.
func NewSweeper(rt *Runtime, opts ...SweeperOption) (*Sweeper, error) {
	if rt == nil {
		return nil, errors.New("idem: sweeper: runtime is nil")
	}
	s := &Sweeper{rt: rt, batch: 1000, interval: time.Minute}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// RunOnce deletes expired records batch by batch until a batch comes back
// short, and returns how many it deleted.
func (s *Sweeper) RunOnce(ctx context.Context) (int, error) {
	total := 0
	start := time.Now()
	defer func() {
		s.rt.emit(ctx, Event{Kind: EventSwept, Count: total})
		s.rt.phase(ctx, "", PhaseSweep, start)
	}()
	for {
		n, err := s.rt.store.Sweep(ctx, s.batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("idem: sweeper: %w", err)
		}
		if n < s.batch {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Run sweeps every interval until ctx is cancelled; it returns nil then.
// Store errors are logged and retried at the next interval.
func (s *Sweeper) Run(ctx context.Context) error {
	for {
		n, err := s.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.rt.cfg.logger.ErrorContext(ctx, "idem: sweep failed", "err", err, "deleted", n)
		} else if n > 0 {
			s.rt.cfg.logger.DebugContext(ctx, "idem: swept expired records", "deleted", n)
		}
		if sleepCtx(ctx, s.interval) != nil {
			return nil
		}
	}
}
