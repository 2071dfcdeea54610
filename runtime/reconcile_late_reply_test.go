package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// slowRetake holds back the reply of the compare-and-set that takes an
// UNKNOWN record back to PROCESSING (an inline reconciliation whose query
// said the effect did not happen) until release is closed; the write
// itself is applied at once.
type slowRetake struct {
	runtime.Store
	applied chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *slowRetake) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	v, err := s.Store.Transition(ctx, p)
	if p.From == runtime.StateUnknown && p.To == runtime.StateProcessing {
		s.once.Do(func() { close(s.applied) })
		<-s.release
	}
	return v, err
}

// TestInlineReconcileLateReplyNeverOverlaps: the lease rule after an
// inline reconciliation. A retry finds its call UNKNOWN, its query says
// the effect did not happen, and its compare-and-set back to PROCESSING is
// applied, but the reply comes back only once the lease it granted has
// expired and a duplicate has taken the record over and is running the
// effect. The late worker must count its lease from the write's sending,
// confirm it before starting the effect, and stop: the effect runs once,
// never two at a time, and the late worker is told ErrLeaseLost.
func TestInlineReconcileLateReplyNeverOverlaps(t *testing.T) {
	const lease = 600 * time.Millisecond
	mem := memstore.New()
	ctx := context.Background()
	var running, runs, overlaps atomic.Int32
	dupRuns := make(chan struct{})
	var dupOnce sync.Once
	effect := func(dup bool) func(context.Context, string) (string, error) {
		return func(ctx context.Context, _ string) (string, error) {
			runs.Add(1)
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			if dup {
				dupOnce.Do(func() { close(dupRuns) })
			}
			select {
			case <-time.After(lease):
				return "done", nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}
	}
	notHappened := func(context.Context, string) (string, runtime.Outcome, error) {
		return "", runtime.OutcomeNotHappened, nil
	}
	call := func(dup bool) runtime.Call[string, string] {
		return runtime.Call[string, string]{Operation: "Op.Retake", Key: "k", Request: "r", Effect: effect(dup), Query: notHappened}
	}
	// The first attempt times out: UNKNOWN.
	first0, err := runtime.New(mem, runtime.WithOwner("first"), runtime.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	c := call(false)
	c.Effect = func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }
	if _, err := runtime.Do(ctx, first0, c); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first attempt: %v, want ErrOutcomeUnknown", err)
	}
	slow := &slowRetake{Store: mem, applied: make(chan struct{}), release: dupRuns}
	defer dupOnce.Do(func() { close(dupRuns) }) // never leave the late worker blocked
	late, err := runtime.New(slow, runtime.WithOwner("late"), runtime.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := runtime.New(mem, runtime.WithOwner("dup"), runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	lateErr := make(chan error, 1)
	go func() {
		_, err := runtime.Do(ctx, late, call(false))
		lateErr <- err
	}()
	<-slow.applied
	time.Sleep(lease + lease/4) // the lease the late write granted expires
	if _, err := runtime.Do(ctx, dup, call(true)); err != nil {
		t.Fatalf("the duplicate: %v", err)
	}
	err = <-lateErr
	if runs.Load() != 1 || overlaps.Load() != 0 {
		t.Fatalf("the effect ran %d times (%d overlaps); the late worker's call: %v", runs.Load(), overlaps.Load(), err)
	}
	if !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("the late worker's call: %v, want ErrLeaseLost", err)
	}
}
