package runtime_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// countingStore counts renewals.
type countingStore struct {
	runtime.Store
	renewals atomic.Int64
}

func (s *countingStore) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, p)
}

// TestRenewalsQuickCallsArmNothing: calls that end before their first
// renewal is due leave nothing scheduled and do not reset the runtime's
// one timer; calls that run longer are each renewed by it.
func TestRenewalsQuickCallsArmNothing(t *testing.T) {
	store := &countingStore{Store: memstore.New()}
	// The lease rule stops an effect whose renewal is not answered within
	// lease - lease/10 of the last confirmed one: with a 60 ms lease a
	// process starved for 35 ms between a round's start and its answer
	// (seen under bench/ciload.sh: 1 run in 10) lost a slow call's lease,
	// rightly. 300 ms leaves such a stall 170 ms, and is still far below
	// any lease a service would run with.
	const lease = 300 * time.Millisecond
	rt, err := runtime.New(store, runtime.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quick := func(context.Context, int) (int, error) { return 1, nil }
	var armedAt time.Time
	for i := range 20 {
		if _, err := runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "op", Key: "quick-" + strconv.Itoa(i), Request: i, Effect: quick}); err != nil {
			t.Fatal(err)
		}
		n, at := runtime.RenewalsScheduled(rt)
		if n != 0 {
			t.Fatalf("call %d: %d heartbeats still scheduled after the call", i, n)
		}
		if i == 0 {
			armedAt = at
		} else if !at.Equal(armedAt) && time.Since(armedAt) < lease/runtime.RenewEvery/2 {
			t.Fatalf("call %d re-armed the timer (for %v, armed for %v)", i, at, armedAt)
		}
	}

	// Three slow calls at once, each over three leases: each is renewed
	// (by the lease rule, every lease/3) and none loses its lease.
	store.renewals.Store(0)
	slow := func(ctx context.Context, _ int) (int, error) {
		select {
		case <-time.After(3 * lease):
			return 1, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	starved := stall.Start()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() {
			_, err := runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "op", Key: "slow-" + strconv.Itoa(i), Request: i, Effect: slow})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a slow call: %v", err)
		}
	}
	// Every lease/3, three leases: 8 renewals a call on time, 6 asked. A
	// process that did not run for a third of the lease (every core busy
	// with other work) renews less often, late; it must still renew each
	// call often enough to keep its lease (the errors above), at least
	// twice in three leases.
	want := int64(3 * 6)
	if worst := starved.Stop(); worst >= lease/3 {
		t.Logf("the process stalled for up to %v (the machine's load): asking 2 renewals a call, not 6", worst)
		want = 3 * 2
	}
	if n := store.renewals.Load(); n < want {
		t.Errorf("%d renewals for three calls of three leases each, want at least %d (every lease/3)", n, want)
	}
	if n, _ := runtime.RenewalsScheduled(rt); n != 0 {
		t.Errorf("%d heartbeats still scheduled after the calls", n)
	}
}

// TestCallScope: runtime.Call.Scope is the identity's scope, in place of the
// context's, and the effect's and the observer's contexts carry it.
func TestCallScope(t *testing.T) {
	store := memstore.New()
	var observed []string
	var mu sync.Mutex
	obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, runtime.ScopeFrom(ctx))
	})
	for _, observe := range []bool{false, true} {
		opts := []runtime.Option{}
		if observe {
			opts = append(opts, runtime.WithObserver(obs))
		}
		rt, err := runtime.New(store, opts...)
		if err != nil {
			t.Fatal(err)
		}
		observed = nil
		var inEffect string
		ctx := runtime.WithScope(context.Background(), "from-ctx")
		_, err = runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "op", Key: "k" + strconv.FormatBool(observe), Scope: "tenant", Request: 1,
			Effect: func(ctx context.Context, _ int) (int, error) { inEffect = runtime.ScopeFrom(ctx); return 1, nil }})
		if err != nil {
			t.Fatal(err)
		}
		if inEffect != "tenant" {
			t.Errorf("observe=%v: the effect's scope is %q, want tenant", observe, inEffect)
		}
		if _, err := store.Get(context.Background(), runtime.Identity{Scope: "tenant", Operation: "op", Key: "k" + strconv.FormatBool(observe)}); err != nil {
			t.Errorf("observe=%v: the record is not in the call's scope: %v", observe, err)
		}
		for _, s := range observed {
			if s != "tenant" {
				t.Errorf("observe=%v: an observer got scope %q, want tenant", observe, s)
			}
		}
		if observe && len(observed) == 0 {
			t.Error("nothing observed")
		}
	}
}
