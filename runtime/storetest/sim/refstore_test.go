package sim

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/idemkit/idem/runtime"
)

// refStore is memstore with versions from a store-wide counter: the
// reference the simulation checks its own model against.
type refStore struct {
	seq int64
	// brokenTakeover takes over PROCESSING records whose lease is live: a
	// store bug the simulation must catch.
	brokenTakeover bool
	mu             sync.Mutex
	now            func() time.Time
	records        map[runtime.Identity]*runtime.Record
}

func newRefStore(now func() time.Time) *refStore {
	return &refStore{now: now, records: make(map[runtime.Identity]*runtime.Record)}
}

var _ runtime.Store = (*refStore)(nil)

func (s *refStore) snapshot(r *runtime.Record, now time.Time) runtime.Record {
	c := *r
	c.Fingerprint = slices.Clone(r.Fingerprint)
	c.Request = slices.Clone(r.Request)
	c.Response = slices.Clone(r.Response)
	c.StoreNow = now
	return c
}

func expired(t, now time.Time) bool { return !t.IsZero() && !t.After(now) }

func (s *refStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return runtime.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, ok := s.records[p.ID]
	switch {
	case !ok || (r.State.Final() && expired(r.ExpiresAt, now)):
		s.seq++
		version := s.seq
		r = &runtime.Record{
			ID: p.ID, Fingerprint: slices.Clone(p.Fingerprint), State: runtime.StateProcessing,
			Owner: p.Owner, Version: version, LeaseExpiresAt: now.Add(p.Lease),
			Request: slices.Clone(p.Request), CreatedAt: now, UpdatedAt: now,
		}
		s.records[p.ID] = r
	case r.State == runtime.StateProcessing && (expired(r.LeaseExpiresAt, now) || s.brokenTakeover) && bytes.Equal(r.Fingerprint, p.Fingerprint):
		r.Owner, r.Version, r.LeaseExpiresAt = p.Owner, s.next(), now.Add(p.Lease)
		r.Takeovers++
		r.UpdatedAt = now
	case p.AcquireUnknown && r.State == runtime.StateUnknown && !r.LeaseExpiresAt.After(now) && bytes.Equal(r.Fingerprint, p.Fingerprint):
		r.Owner, r.Version, r.LeaseExpiresAt = p.Owner, s.next(), now.Add(p.Lease)
		r.Attempts++
		r.UpdatedAt = now
	default:
		return runtime.ClaimResult{Record: s.snapshot(r, now)}, nil
	}
	return runtime.ClaimResult{Claimed: true, Record: s.snapshot(r, now)}, nil
}

func (s *refStore) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[id]
	if !ok {
		return runtime.Record{}, runtime.ErrNotFound
	}
	return s.snapshot(r, s.now()), nil
}

// held returns the record if it is in (state, owner, version).
func (s *refStore) held(id runtime.Identity, state runtime.State, owner string, version int64) (*runtime.Record, error) {
	r, ok := s.records[id]
	if !ok || r.State != state || r.Owner != owner || r.Version != version {
		return nil, runtime.ErrLeaseLost
	}
	return r, nil
}

func (s *refStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(p.ID, p.From, p.Owner, p.Version)
	if err != nil {
		return 0, err
	}
	now := s.now()
	r.State, r.Owner, r.Version, r.UpdatedAt = p.To, p.NewOwner, s.next(), now
	r.LeaseExpiresAt, r.ExpiresAt = time.Time{}, time.Time{}
	if p.Lease > 0 {
		r.LeaseExpiresAt = now.Add(p.Lease)
	}
	if p.To.Final() {
		r.ExpiresAt = now.Add(p.TTL)
		r.Response = slices.Clone(p.Response)
	}
	return r.Version, nil
}

func (s *refStore) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(p.ID, p.State, p.Owner, p.Version)
	if err != nil {
		return time.Time{}, err
	}
	now := s.now()
	r.LeaseExpiresAt, r.UpdatedAt = now.Add(p.Lease), now
	return r.LeaseExpiresAt, nil
}

func (s *refStore) Release(ctx context.Context, p runtime.ReleaseParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.held(p.ID, p.State, p.Owner, p.Version); err != nil {
		return err
	}
	delete(s.records, p.ID)
	return nil
}

func (s *refStore) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var due []*runtime.Record
	for _, r := range s.records {
		if len(p.Operations) > 0 && !slices.Contains(p.Operations, r.ID.Operation) {
			continue
		}
		switch {
		case r.State == runtime.StateProcessing && expired(r.LeaseExpiresAt, now):
		case r.State == runtime.StateUnknown && !r.LeaseExpiresAt.After(now) &&
			(p.MaxAttempts <= 0 || r.Attempts < p.MaxAttempts):
		default:
			continue
		}
		due = append(due, r)
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].LeaseExpiresAt.Equal(due[j].LeaseExpiresAt) {
			return due[i].LeaseExpiresAt.Before(due[j].LeaseExpiresAt)
		}
		return due[i].CreatedAt.Before(due[j].CreatedAt)
	})
	if p.Limit > 0 && len(due) > p.Limit {
		due = due[:p.Limit]
	}
	out := make([]runtime.Record, 0, len(due))
	for _, r := range due {
		r.State, r.Owner, r.Version = runtime.StateUnknown, p.Owner, s.next()
		r.LeaseExpiresAt, r.UpdatedAt = now.Add(p.Lease), now
		r.Attempts++
		out = append(out, s.snapshot(r, now))
	}
	return out, nil
}

func (s *refStore) Sweep(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for id, r := range s.records {
		if limit > 0 && n >= limit {
			break
		}
		if r.State.Final() && expired(r.ExpiresAt, now) {
			delete(s.records, id)
			n++
		}
	}
	return n, nil
}

func (s *refStore) next() int64 {
	s.seq++
	return s.seq
}
