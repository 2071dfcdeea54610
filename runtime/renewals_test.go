package runtime

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingStore counts renewals and records the scope of every call's
// identity; it keeps records in a map.
type countingStore struct {
	Store
	renewals atomic.Int64
}

func (s *countingStore) Renew(ctx context.Context, p RenewParams) (time.Time, error) {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, p)
}

// TestRenewalsQuickCallsArmNothing: calls that end before their first
// renewal is due leave nothing scheduled and do not reset the runtime's
// one timer; calls that run longer are each renewed by it.
func TestRenewalsQuickCallsArmNothing(t *testing.T) {
	store := &countingStore{Store: newMapStore()}
	const lease = 60 * time.Millisecond
	rt, err := New(store, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quick := func(context.Context, int) (int, error) { return 1, nil }
	var armedAt time.Time
	for i := range 20 {
		if _, err := Do(ctx, rt, Call[int, int]{Operation: "op", Key: "quick-" + strconv.Itoa(i), Request: i, Effect: quick}); err != nil {
			t.Fatal(err)
		}
		rt.renewals.mu.Lock()
		n, at := len(rt.renewals.due), rt.renewals.at
		rt.renewals.mu.Unlock()
		if n != 0 {
			t.Fatalf("call %d: %d heartbeats still scheduled after the call", i, n)
		}
		if i == 0 {
			armedAt = at
		} else if !at.Equal(armedAt) && time.Since(armedAt) < lease/renewEvery/2 {
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
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() {
			_, err := Do(ctx, rt, Call[int, int]{Operation: "op", Key: "slow-" + strconv.Itoa(i), Request: i, Effect: slow})
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
	if n := store.renewals.Load(); n < 3*6 {
		t.Errorf("%d renewals for three calls of three leases each, want at least 18 (every lease/3)", n)
	}
	rt.renewals.mu.Lock()
	defer rt.renewals.mu.Unlock()
	if n := len(rt.renewals.due); n != 0 {
		t.Errorf("%d heartbeats still scheduled after the calls", n)
	}
}

// TestCallScope: Call.Scope is the identity's scope, in place of the
// context's, and the effect's and the observer's contexts carry it.
func TestCallScope(t *testing.T) {
	store := newMapStore()
	var observed []string
	var mu sync.Mutex
	obs := ObserverFunc(func(ctx context.Context, e Event) {
		mu.Lock()
		defer mu.Unlock()
		observed = append(observed, ScopeFrom(ctx))
	})
	for _, observe := range []bool{false, true} {
		opts := []Option{}
		if observe {
			opts = append(opts, WithObserver(obs))
		}
		rt, err := New(store, opts...)
		if err != nil {
			t.Fatal(err)
		}
		observed = nil
		var inEffect string
		ctx := WithScope(context.Background(), "from-ctx")
		_, err = Do(ctx, rt, Call[int, int]{Operation: "op", Key: "k" + strconv.FormatBool(observe), Scope: "tenant", Request: 1,
			Effect: func(ctx context.Context, _ int) (int, error) { inEffect = ScopeFrom(ctx); return 1, nil }})
		if err != nil {
			t.Fatal(err)
		}
		if inEffect != "tenant" {
			t.Errorf("observe=%v: the effect's scope is %q, want tenant", observe, inEffect)
		}
		if _, err := store.Get(context.Background(), Identity{Scope: "tenant", Operation: "op", Key: "k" + strconv.FormatBool(observe)}); err != nil {
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

// mapStore is a minimal correct Store for the runtime's internal tests:
// claims, transitions, renewals and releases by compare-and-set.
type mapStore struct {
	mu      sync.Mutex
	records map[Identity]*Record
	version int64
}

func newMapStore() *mapStore { return &mapStore{records: map[Identity]*Record{}} }

func (s *mapStore) Claim(_ context.Context, p ClaimParams) (ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if r, ok := s.records[p.ID]; ok {
		return ClaimResult{Record: *r}, nil
	}
	s.version++
	r := &Record{ID: p.ID, Fingerprint: p.Fingerprint, Request: p.Request, State: StateProcessing, Owner: p.Owner,
		Version: s.version, LeaseExpiresAt: now.Add(p.Lease), StoreNow: now}
	s.records[p.ID] = r
	return ClaimResult{Claimed: true, Record: *r}, nil
}

func (s *mapStore) Get(_ context.Context, id Identity) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.records[id]; ok {
		return *r, nil
	}
	return Record{}, ErrNotFound
}

func (s *mapStore) held(id Identity, st State, owner string, v int64) (*Record, error) {
	r, ok := s.records[id]
	if !ok || r.State != st || r.Owner != owner || r.Version != v {
		return nil, ErrLeaseLost
	}
	return r, nil
}

func (s *mapStore) Transition(_ context.Context, p TransitionParams) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(p.ID, p.From, p.Owner, p.Version)
	if err != nil {
		return 0, err
	}
	s.version++
	r.State, r.Owner, r.Version, r.Response = p.To, p.NewOwner, s.version, p.Response
	return r.Version, nil
}

func (s *mapStore) Renew(_ context.Context, p RenewParams) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(p.ID, p.State, p.Owner, p.Version)
	if err != nil {
		return time.Time{}, err
	}
	r.LeaseExpiresAt = time.Now().Add(p.Lease)
	return r.LeaseExpiresAt, nil
}

func (s *mapStore) Release(_ context.Context, p ReleaseParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(p.ID, p.State, p.Owner, p.Version); err != nil {
		return err
	}
	delete(s.records, p.ID)
	return nil
}

func (s *mapStore) AcquirePending(context.Context, AcquireParams) ([]Record, error) {
	return nil, errors.New("not supported")
}

func (s *mapStore) Sweep(context.Context, int) (int, error) { return 0, nil }

// TestTokensUniqueAcrossBatches: write tokens are owner#counter, counting
// from 1 in base 36, none repeated, across batches and concurrent callers.
func TestTokensUniqueAcrossBatches(t *testing.T) {
	var tk tokens
	const callers, each = 4, 3*tokenBatch + 5
	got := make(chan string, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				got <- tk.make("owner-1")
			}
		})
	}
	wg.Wait()
	close(got)
	seen := map[string]bool{}
	for tok := range got {
		if seen[tok] {
			t.Fatalf("token %q handed out twice", tok)
		}
		seen[tok] = true
	}
	for i := 1; i <= callers*each; i++ {
		if want := "owner-1#" + strconv.FormatUint(uint64(i), 36); !seen[want] {
			t.Errorf("token %q not handed out", want)
		}
	}
}
