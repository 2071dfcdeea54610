// Package memstore is an in-process [runtime.Store]: for tests, and the
// embedded default of programs that run as a single process. It is safe for
// concurrent use. Records do not survive the process.
package memstore

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Store keeps records in memory. Its clock is the process clock (or the one
// given with [WithClock]). It keeps the byte slices of the parameters it is
// given (fingerprint, request, response), as the [runtime.Store] contract
// allows, and the records it returns share them: neither may be modified.
type Store struct {
	mu      sync.Mutex
	now     func() time.Time
	records map[runtime.Identity]*runtime.Record
	// version is the last version handed out: every version comes from it,
	// so none repeats for an identity across the record's lives.
	version int64
}

// nextVersion returns a version above every one handed out; s.mu is held.
func (s *Store) nextVersion() int64 {
	s.version++
	return s.version
}

// Option configures a [Store].
type Option func(*Store)

// WithClock sets the store's clock, for tests that move time by hand.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty, ready store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, records: make(map[runtime.Identity]*runtime.Record)}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ runtime.Store = (*Store)(nil)

// snapshot returns a copy of r read at now. Its byte slices are shared with
// the store, which never writes into a slice it holds (every write stores
// the slices it is given, which their caller no longer modifies): callers
// must not modify them, as the runtime never does.
func (s *Store) snapshot(r *runtime.Record, now time.Time) runtime.Record {
	c := *r
	c.StoreNow = now
	return c
}

func expired(t, now time.Time) bool { return !t.IsZero() && !t.After(now) }

// Claim implements [runtime.Store].
func (s *Store) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return runtime.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, ok := s.records[p.ID]
	switch {
	case !ok || (r.State.Final() && expired(r.ExpiresAt, now)):
		r = &runtime.Record{
			ID: p.ID, Fingerprint: p.Fingerprint, State: runtime.StateProcessing,
			Owner: p.Owner, Version: s.nextVersion(), LeaseExpiresAt: now.Add(p.Lease),
			Request: p.Request, CreatedAt: now, UpdatedAt: now,
		}
		s.records[p.ID] = r
	case r.State == runtime.StateProcessing && expired(r.LeaseExpiresAt, now) && bytes.Equal(r.Fingerprint, p.Fingerprint):
		r.Owner, r.Version, r.LeaseExpiresAt, r.Token = p.Owner, s.nextVersion(), now.Add(p.Lease), ""
		r.Takeovers++
		r.UpdatedAt = now
	case p.AcquireUnknown && r.State == runtime.StateUnknown && !r.LeaseExpiresAt.After(now) && bytes.Equal(r.Fingerprint, p.Fingerprint):
		r.Owner, r.Version, r.LeaseExpiresAt, r.Token = p.Owner, s.nextVersion(), now.Add(p.Lease), ""
		r.UpdatedAt = now
	default:
		return runtime.ClaimResult{Record: s.snapshot(r, now)}, nil
	}
	return runtime.ClaimResult{Claimed: true, Record: s.snapshot(r, now)}, nil
}

// Get implements [runtime.Store].
func (s *Store) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
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
func (s *Store) held(id runtime.Identity, state runtime.State, owner string, version int64) (*runtime.Record, error) {
	r, ok := s.records[id]
	if !ok || r.State != state || r.Owner != owner || r.Version != version {
		return nil, runtime.ErrLeaseLost
	}
	return r, nil
}

// Transition implements [runtime.Store].
func (s *Store) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.held(p.ID, p.From, p.Owner, p.Version)
	if err != nil {
		if r := s.records[p.ID]; r != nil && p.Token != "" && r.Token == p.Token {
			return r.Version, nil // this very write, retried after its reply was lost
		}
		return 0, err
	}
	now := s.now()
	r.State, r.Owner, r.Version, r.UpdatedAt = p.To, p.NewOwner, s.nextVersion(), now
	r.Token, r.Note, r.ResponseOmitted = p.Token, p.Note, p.ResponseOmitted
	r.LeaseExpiresAt, r.ExpiresAt = time.Time{}, time.Time{}
	if p.Lease > 0 {
		r.LeaseExpiresAt = now.Add(p.Lease)
	}
	if p.To.Final() {
		r.ExpiresAt = now.Add(p.TTL)
		r.Response = p.Response
	}
	return r.Version, nil
}

// Renew implements [runtime.Store].
func (s *Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
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

// Release implements [runtime.Store].
func (s *Store) Release(ctx context.Context, p runtime.ReleaseParams) error {
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

// AcquirePending implements [runtime.Store]. Records are taken oldest lease
// first.
func (s *Store) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
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
		r.State, r.Owner, r.Version, r.Token = runtime.StateUnknown, p.Owner, s.nextVersion(), ""
		r.LeaseExpiresAt, r.UpdatedAt = now.Add(p.Lease), now
		r.Attempts++
		out = append(out, s.snapshot(r, now))
	}
	return out, nil
}

// Sweep implements [runtime.Store].
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
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

// Len returns the number of records held, swept or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// List implements [runtime.Lister].
func (s *Store) List(ctx context.Context, p runtime.ListParams) ([]runtime.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []runtime.Record
	for id, r := range s.records {
		if p.After != nil && !p.After.Less(id) {
			continue
		}
		rec := s.snapshot(r, now)
		if p.Matches(&rec) {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.Less(out[j].ID) })
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

var _ runtime.Lister = (*Store)(nil)
