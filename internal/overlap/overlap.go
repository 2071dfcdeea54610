// Package overlap counts effects that run beside each other, for tests of
// the lease rule: an effect that starts while another one's context is
// still live overlaps it. The rule's promise is about the runtime's part,
// telling an effect to stop (cancelling its context) before its lease can
// expire; how fast an effect returns once told is the effect's part, and
// under a loaded scheduler an effect's goroutine can wake long after its
// context ended, so an effect counts as running only while its context is
// live.
package overlap

import (
	"context"
	"sync"
	"time"
)

// Effects records the effects of one identity. The zero value is ready.
type Effects struct {
	mu       sync.Mutex
	live     map[*context.Context]struct{}
	ran      int
	overlaps int
}

// Run records an effect on ctx that lasts d, or until ctx ends; it
// returns context.Cause(ctx) when ctx ended first.
func (e *Effects) Run(ctx context.Context, d time.Duration) error {
	e.mu.Lock()
	if e.live == nil {
		e.live = make(map[*context.Context]struct{})
	}
	for c := range e.live {
		if (*c).Err() == nil {
			e.overlaps++
		}
	}
	e.live[&ctx] = struct{}{}
	e.ran++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.live, &ctx)
		e.mu.Unlock()
	}()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Counts returns how many effects ran and how many started beside a live
// one.
func (e *Effects) Counts() (ran, overlaps int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ran, e.overlaps
}
