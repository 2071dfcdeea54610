// Package memstore is an in-process [runtime.Store]: for tests, and the
// embedded default of programs that run as a single process. It is safe for
// concurrent use. Records do not survive the process.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math"
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
//
// Records live in a slab of fixed-size blocks, indexed by a hash of their
// identity: a new record takes a free slot and allocates nothing of its
// own, the garbage collector scans the blocks rather than one object per
// record, each with nine pointers (its identity's strings, its byte slices
// and strings) and nothing else, and the index holds no pointers at all,
// so it is neither scanned nor moved with write barriers when it grows.
// Slots freed by a release or a sweep are reused; the blocks themselves,
// like the index, are kept at the size the store once reached.
//
// Times are kept as offsets from the store clock's first reading (its
// epoch), so they compare as the clock's readings do: by the monotonic
// clock for the process clock, which a change of the wall clock does not
// move. A record's times read back as the epoch plus their offset.
type Store struct {
	mu  sync.Mutex
	now func() time.Time
	// epoch is the clock's first reading (set is false until then); times
	// are kept as stamps from it.
	epoch    time.Time
	epochSet bool
	// index maps the hash of an identity (with seed) to the first slot of
	// the records whose identities have that hash, chained by next.
	index map[uint64]uint32
	seed  maphash.Seed
	// mask keeps the bits of a hash the index uses: all of them, or (in
	// tests) so few that identities share chains.
	mask uint64
	slab slab
	// n counts the records held.
	n int
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
	s := &Store{now: time.Now, index: make(map[uint64]uint32), seed: maphash.MakeSeed(), mask: math.MaxUint64}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ runtime.Store = (*Store)(nil)

// record is a record as the store keeps it: a [runtime.Record] without its
// read time, with its times as stamps and its state as a code (stateNone
// in a free slot).
type record struct {
	id             runtime.Identity
	fingerprint    []byte
	request        []byte
	response       []byte
	owner          string
	token          string
	note           string
	version        int64
	leaseExpiresAt stamp
	expiresAt      stamp
	createdAt      stamp
	updatedAt      stamp
	takeovers      int32
	attempts       int32
	state          state
	omitted        bool
	// next is the next slot in the index's chain for this record's hash,
	// or noSlot.
	next uint32
}

// noSlot ends a chain of the index.
const noSlot = math.MaxUint32

// stamp is a time on the store's clock: its offset from the store's epoch
// in nanoseconds, or noTime for the zero time. Stamps compare as the times
// they stand for.
type stamp int64

const noTime stamp = math.MinInt64

// rebaseSpan is how far from the epoch the clock may read before the
// store moves its epoch: a stamp spans 292 years either way, and a lease or
// a TTL adds to a reading (saturating past that).
const rebaseSpan = 100 * 365 * 24 * time.Hour

// clock reads the store's clock, making the first reading the epoch, and a
// reading far from it (a clock set by hand) the new one; s.mu is held.
func (s *Store) clock() (time.Time, stamp) {
	now := s.now()
	if !s.epochSet {
		s.epoch, s.epochSet = now, true
	} else if d := now.Sub(s.epoch); d > rebaseSpan || d < -rebaseSpan {
		s.rebase(now)
	}
	// A reading is a time even when it is the zero time (a hand clock's
	// first): never noTime.
	return now, max(stamp(now.Sub(s.epoch)), noTime+1)
}

// rebase makes epoch the store's epoch, restating every record's times;
// s.mu is held.
func (s *Store) rebase(epoch time.Time) {
	for i := range s.slab.used {
		r := s.slab.at(i)
		if r.state == stateNone {
			continue // a free slot
		}
		for _, st := range []*stamp{&r.leaseExpiresAt, &r.expiresAt, &r.createdAt, &r.updatedAt} {
			*st = stampOf(epoch, timeOf(s.epoch, *st))
		}
	}
	s.epoch = epoch
}

// time returns the time st stands for; s.mu is held.
func (s *Store) time(st stamp) time.Time { return timeOf(s.epoch, st) }

// stampOf returns t as a stamp from epoch. (A time more than 292 years
// from it is kept as the nearest that is not.)
func stampOf(epoch, t time.Time) stamp {
	if t.IsZero() {
		return noTime
	}
	return max(stamp(t.Sub(epoch)), noTime+1)
}

// timeOf returns the time st, a stamp from epoch, stands for.
func timeOf(epoch time.Time, st stamp) time.Time {
	if st == noTime {
		return time.Time{}
	}
	return epoch.Add(time.Duration(st))
}

// expired reports whether a deadline, zero for none, is at or before now.
func (st stamp) expired(now stamp) bool { return st != noTime && st <= now }

// after returns the stamp d after st.
func (st stamp) after(d time.Duration) stamp {
	// As time.Time.Add: saturating rather than wrapping.
	switch {
	case d > 0 && st > math.MaxInt64-stamp(d):
		return math.MaxInt64
	case d < 0 && st < noTime+1-stamp(d):
		return noTime + 1
	}
	return st + stamp(d)
}

// state is a record state as the store keeps it: a code for one of the
// four states of [runtime.State].
type state uint8

const (
	stateNone state = iota // no state: a [runtime.State] that is not Valid
	stateProcessing
	stateSuccess
	stateFailed
	stateUnknown
)

var stateNames = [...]runtime.State{
	stateProcessing: runtime.StateProcessing, stateSuccess: runtime.StateSuccess,
	stateFailed: runtime.StateFailed, stateUnknown: runtime.StateUnknown,
}

func stateOf(st runtime.State) state {
	switch st {
	case runtime.StateProcessing:
		return stateProcessing
	case runtime.StateSuccess:
		return stateSuccess
	case runtime.StateFailed:
		return stateFailed
	case runtime.StateUnknown:
		return stateUnknown
	}
	return stateNone
}

func (st state) final() bool { return st == stateSuccess || st == stateFailed }

// blockSize is how many records one block of the slab holds.
const blockSize = 64

// slab holds records in blocks that never move, so a *record stays valid
// while its slot is in use.
type slab struct {
	blocks []*[blockSize]record
	// free lists the slots released, reused last in first out; used counts
	// the slots ever taken.
	free []uint32
	used uint32
}

// at returns the record in slot i.
func (sl *slab) at(i uint32) *record { return &sl.blocks[i/blockSize][i%blockSize] }

// take returns a free slot, growing the slab by a block when none is left.
func (sl *slab) take() uint32 {
	if n := len(sl.free); n > 0 {
		i := sl.free[n-1]
		sl.free = sl.free[:n-1]
		return i
	}
	if sl.used%blockSize == 0 {
		sl.blocks = append(sl.blocks, new([blockSize]record))
	}
	sl.used++
	return sl.used - 1
}

// put frees slot i, dropping what its record holds.
func (sl *slab) put(i uint32) {
	*sl.at(i) = record{}
	sl.free = append(sl.free, i)
}

// snapshot returns the record in r, read at now; s.mu is held. Its byte
// slices are shared with the store, which never writes into a slice it
// holds (every write stores the slices it is given, which their caller no
// longer modifies): callers must not modify them, as the runtime never
// does.
func (s *Store) snapshot(r *record, now time.Time) runtime.Record {
	var out runtime.Record
	s.read(&out, r, now)
	return out
}

// read sets *out to the record in r, read at now, as snapshot returns it;
// s.mu is held.
func (s *Store) read(out *runtime.Record, r *record, now time.Time) {
	*out = runtime.Record{
		ID: r.id, Fingerprint: r.fingerprint, State: stateNames[r.state], Owner: r.owner, Version: r.version,
		Request: r.request, Response: r.response, ResponseOmitted: r.omitted, Note: r.note, Token: r.token,
		Takeovers: r.takeovers, Attempts: r.attempts, StoreNow: now,
	}
	out.LeaseExpiresAt, out.ExpiresAt = s.time(r.leaseExpiresAt), s.time(r.expiresAt)
	out.CreatedAt, out.UpdatedAt = s.time(r.createdAt), s.time(r.updatedAt)
}

// hash returns the index's hash of id.
func (s *Store) hash(id runtime.Identity) uint64 { return maphash.Comparable(s.seed, id) & s.mask }

// chain is where the index keeps, or would keep, an identity: its hash and
// the first slot of the chain for that hash (noSlot when there is none).
type chain struct {
	h    uint64
	head uint32
}

// find returns the slot and the record of id (nil when there is none) and
// its chain; s.mu is held.
func (s *Store) find(id runtime.Identity) (uint32, *record, chain) {
	c := chain{h: s.hash(id), head: noSlot}
	i, ok := s.index[c.h]
	if ok {
		c.head = i
	}
	for ok {
		r := s.slab.at(i)
		if r.id == id {
			return i, r, c
		}
		i = r.next
		ok = i != noSlot
	}
	return noSlot, nil, c
}

// get returns the record of id, or nil; s.mu is held.
func (s *Store) get(id runtime.Identity) *record {
	_, r, _ := s.find(id)
	return r
}

// insert returns a new, empty record for id, which has no record, at the
// head of c, its chain as find returned it with nothing changed since;
// s.mu is held.
func (s *Store) insert(id runtime.Identity, c chain) *record {
	i := s.slab.take()
	r := s.slab.at(i)
	r.id, r.next = id, c.head // after any identity with the same hash
	s.index[c.h] = i
	s.n++
	return r
}

// remove deletes the record in slot i; s.mu is held.
func (s *Store) remove(i uint32) {
	r := s.slab.at(i)
	h := s.hash(r.id)
	switch head := s.index[h]; {
	case head == i && r.next == noSlot:
		delete(s.index, h)
	case head == i:
		s.index[h] = r.next
	default:
		prev := s.slab.at(head)
		for prev.next != i {
			prev = s.slab.at(prev.next)
		}
		prev.next = r.next
	}
	s.slab.put(i)
	s.n--
}

// each calls f with every record held, in slot order, until f returns
// false; s.mu is held. f may remove the record it is called with.
func (s *Store) each(f func(i uint32, r *record) bool) {
	for i := range s.slab.used {
		if r := s.slab.at(i); r.state != stateNone && !f(i, r) {
			return
		}
	}
}

// Claim implements [runtime.Store].
func (s *Store) Claim(ctx context.Context, p runtime.ClaimParams) (res runtime.ClaimResult, err error) {
	if err := ctx.Err(); err != nil {
		return runtime.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now, at := s.clock()
	_, r, c := s.find(p.ID)
	atVersion := r == nil || p.IfVersion == 0 || r.version == p.IfVersion // see ClaimParams.IfVersion
	switch {
	case !atVersion:
		s.read(&res.Record, r, now)
		return res, nil
	case r == nil || (r.state.final() && r.expiresAt.expired(at)):
		if r == nil {
			r = s.insert(p.ID, c)
		}
		*r = record{
			id: r.id, next: r.next, fingerprint: p.Fingerprint, state: stateProcessing,
			owner: p.Owner, version: s.nextVersion(), leaseExpiresAt: at.after(p.Lease),
			request: p.Request, createdAt: at, updatedAt: at, expiresAt: noTime,
		}
	case r.state == stateProcessing && r.leaseExpiresAt.expired(at) && bytes.Equal(r.fingerprint, p.Fingerprint):
		r.owner, r.version, r.leaseExpiresAt, r.token = p.Owner, s.nextVersion(), at.after(p.Lease), ""
		r.takeovers++
		r.updatedAt = at
	case p.AcquireUnknown && r.state == stateUnknown && r.leaseExpiresAt <= at && bytes.Equal(r.fingerprint, p.Fingerprint):
		r.owner, r.version, r.leaseExpiresAt, r.token = p.Owner, s.nextVersion(), at.after(p.Lease), ""
		r.updatedAt = at
	default:
		s.read(&res.Record, r, now)
		return res, nil
	}
	res.Claimed = true
	s.read(&res.Record, r, now)
	return res, nil
}

// Get implements [runtime.Store].
func (s *Store) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(id)
	if r == nil {
		return runtime.Record{}, runtime.ErrNotFound
	}
	return s.snapshot(r, s.now()), nil
}

// held returns the slot of the record if it is in (state, owner, version).
func (s *Store) held(id runtime.Identity, st runtime.State, owner string, version int64) (uint32, *record, error) {
	i, r, _ := s.find(id)
	if r == nil || r.state != stateOf(st) || r.owner != owner || r.version != version {
		return 0, nil, runtime.ErrLeaseLost
	}
	return i, r, nil
}

// Transition implements [runtime.Store]. A transition to a state that is
// not one of the four is refused, as PostgreSQL's check constraint does.
func (s *Store) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	to := stateOf(p.To)
	if to == stateNone {
		return 0, fmt.Errorf("memstore: transition of %s/%s/%s to invalid state %q", p.ID.Scope, p.ID.Operation, p.ID.Key, p.To)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, r, err := s.held(p.ID, p.From, p.Owner, p.Version)
	if err != nil {
		if r := s.get(p.ID); r != nil && p.Token != "" && r.token == p.Token {
			return r.version, nil // this very write, retried after its reply was lost
		}
		return 0, err
	}
	_, at := s.clock()
	r.state, r.owner, r.version, r.updatedAt = to, p.NewOwner, s.nextVersion(), at
	r.token, r.note, r.omitted = p.Token, p.Note, p.ResponseOmitted
	if to == stateProcessing {
		r.attempts = 0 // a new run of the effect: its outcome gets every attempt
	}
	r.leaseExpiresAt, r.expiresAt = noTime, noTime
	if p.Lease > 0 {
		r.leaseExpiresAt = at.after(p.Lease)
	}
	if to.final() {
		r.expiresAt = at.after(p.TTL)
		r.response = p.Response
	}
	return r.version, nil
}

// Renew implements [runtime.Store].
func (s *Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, r, err := s.held(p.ID, p.State, p.Owner, p.Version)
	if err != nil {
		return time.Time{}, err
	}
	_, at := s.clock()
	r.leaseExpiresAt, r.updatedAt = at.after(p.Lease), at
	return s.time(r.leaseExpiresAt), nil
}

// Release implements [runtime.Store].
func (s *Store) Release(ctx context.Context, p runtime.ReleaseParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _, err := s.held(p.ID, p.State, p.Owner, p.Version)
	if err != nil {
		return err
	}
	s.remove(i)
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
	now, at := s.clock()
	var due []*record
	s.each(func(_ uint32, r *record) bool {
		if len(p.Operations) > 0 && !slices.Contains(p.Operations, r.id.Operation) {
			return true
		}
		switch {
		case r.state == stateProcessing && r.leaseExpiresAt.expired(at):
		case r.state == stateUnknown && r.leaseExpiresAt <= at &&
			(p.MaxAttempts <= 0 || r.attempts < p.MaxAttempts):
		default:
			return true
		}
		due = append(due, r)
		return true
	})
	slices.SortFunc(due, func(a, b *record) int {
		if c := cmp.Compare(a.leaseExpiresAt, b.leaseExpiresAt); c != 0 {
			return c
		}
		return cmp.Compare(a.createdAt, b.createdAt)
	})
	if p.Limit > 0 && len(due) > p.Limit {
		due = due[:p.Limit]
	}
	out := make([]runtime.Record, 0, len(due))
	for _, r := range due {
		r.state, r.owner, r.version, r.token = stateUnknown, p.Owner, s.nextVersion(), ""
		r.leaseExpiresAt, r.updatedAt = at.after(p.Lease), at
		r.attempts++
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
	_, at := s.clock()
	n := 0
	s.each(func(i uint32, r *record) bool {
		if limit > 0 && n >= limit {
			return false
		}
		if r.state.final() && r.expiresAt.expired(at) {
			s.remove(i)
			n++
		}
		return true
	})
	return n, nil
}

// Len returns the number of records held, swept or not.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
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
	s.each(func(_ uint32, r *record) bool {
		if p.After != nil && !p.After.Less(r.id) {
			return true
		}
		if rec := s.snapshot(r, now); p.Matches(&rec) {
			out = append(out, rec)
		}
		return true
	})
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
