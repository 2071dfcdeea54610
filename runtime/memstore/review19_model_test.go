package memstore

// Adversarial review 19 of the rewritten memory store (slab, index of hash
// chains, times as stamps): a seeded run of every operation against a
// plain map of records with time.Time values (what the store did before
// its rewrite), on a store whose identities share chains (two bits of
// hash), with a hand clock that moves by nanoseconds, by hours and by more
// than rebaseSpan both ways. After every operation the store and the model
// must agree on the operation's answer; after every step, on every record
// (Get) and on List. Stale (state, owner, version) triples of released,
// swept and replaced records are replayed against reused slots.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

type r19Rec struct {
	rec runtime.Record // StoreNow unused
}

type r19Model struct {
	recs    map[runtime.Identity]*r19Rec
	version int64
}

func (m *r19Model) next() int64 { m.version++; return m.version }

func r19Add(t time.Time, d time.Duration) time.Time { return t.Add(d) }

func (m *r19Model) claim(now time.Time, p runtime.ClaimParams) (runtime.ClaimResult, bool) {
	r := m.recs[p.ID]
	final := func(s runtime.State) bool { return s == runtime.StateSuccess || s == runtime.StateFailed }
	expired := func(d time.Time) bool { return !d.IsZero() && !d.After(now) }
	switch {
	case r == nil || final(r.rec.State) && expired(r.rec.ExpiresAt):
		r = &r19Rec{rec: runtime.Record{ID: p.ID, Fingerprint: p.Fingerprint, State: runtime.StateProcessing, Owner: p.Owner,
			Version: m.next(), LeaseExpiresAt: r19Add(now, p.Lease), Request: p.Request, CreatedAt: now, UpdatedAt: now}}
		m.recs[p.ID] = r
	case r.rec.State == runtime.StateProcessing && expired(r.rec.LeaseExpiresAt) && bytes.Equal(r.rec.Fingerprint, p.Fingerprint):
		r.rec.Owner, r.rec.Version, r.rec.LeaseExpiresAt, r.rec.Token = p.Owner, m.next(), r19Add(now, p.Lease), ""
		r.rec.Takeovers++
		r.rec.UpdatedAt = now
	case p.AcquireUnknown && r.rec.State == runtime.StateUnknown && !r.rec.LeaseExpiresAt.After(now) && bytes.Equal(r.rec.Fingerprint, p.Fingerprint):
		r.rec.Owner, r.rec.Version, r.rec.LeaseExpiresAt, r.rec.Token = p.Owner, m.next(), r19Add(now, p.Lease), ""
		r.rec.UpdatedAt = now
	default:
		return runtime.ClaimResult{Record: r.rec}, true
	}
	return runtime.ClaimResult{Claimed: true, Record: r.rec}, true
}

func (m *r19Model) held(id runtime.Identity, st runtime.State, owner string, v int64) *r19Rec {
	r := m.recs[id]
	if r == nil || r.rec.State != st || r.rec.Owner != owner || r.rec.Version != v {
		return nil
	}
	return r
}

func (m *r19Model) transition(now time.Time, p runtime.TransitionParams) (int64, error) {
	r := m.held(p.ID, p.From, p.Owner, p.Version)
	if r == nil {
		if r := m.recs[p.ID]; r != nil && p.Token != "" && r.rec.Token == p.Token {
			return r.rec.Version, nil
		}
		return 0, runtime.ErrLeaseLost
	}
	r.rec.State, r.rec.Owner, r.rec.Version, r.rec.UpdatedAt = p.To, p.NewOwner, m.next(), now
	r.rec.Token, r.rec.Note, r.rec.ResponseOmitted = p.Token, p.Note, p.ResponseOmitted
	if p.To == runtime.StateProcessing {
		r.rec.Attempts = 0 // a new run of the effect (the Store contract, Record.Attempts)
	}
	r.rec.LeaseExpiresAt, r.rec.ExpiresAt = time.Time{}, time.Time{}
	if p.Lease > 0 {
		r.rec.LeaseExpiresAt = r19Add(now, p.Lease)
	}
	if p.To == runtime.StateSuccess || p.To == runtime.StateFailed {
		r.rec.ExpiresAt = r19Add(now, p.TTL)
		r.rec.Response = p.Response
	}
	return r.rec.Version, nil
}

// r19Same compares two records, times by instant.
func r19Same(a, b runtime.Record) bool {
	a.StoreNow, b.StoreNow = time.Time{}, time.Time{}
	for _, p := range [][2]*time.Time{{&a.LeaseExpiresAt, &b.LeaseExpiresAt}, {&a.ExpiresAt, &b.ExpiresAt}, {&a.CreatedAt, &b.CreatedAt}, {&a.UpdatedAt, &b.UpdatedAt}} {
		if !p[0].Equal(*p[1]) {
			return false
		}
		*p[0], *p[1] = time.Time{}, time.Time{}
	}
	if len(a.Response) == 0 && len(b.Response) == 0 {
		a.Response, b.Response = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

func TestReview19ModelCheck(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { r19Run(t, seed, 3000) })
	}
}

func r19Run(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1919))
	base := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	now := base
	s := colliding(WithClock(func() time.Time { return now }))
	m := &r19Model{recs: map[runtime.Identity]*r19Rec{}}
	ids := make([]runtime.Identity, 9)
	for i := range ids {
		ids[i] = runtime.Identity{Scope: []string{"", "a"}[i%2], Operation: []string{"Op", "Op2"}[i%3/2], Key: fmt.Sprint("k", i)}
	}
	type triple struct {
		id  runtime.Identity
		st  runtime.State
		own string
		v   int64
	}
	var seen []triple // every (state, owner, version) ever handed out
	remember := func(r runtime.Record) { seen = append(seen, triple{r.ID, r.State, r.Owner, r.Version}) }
	pick := func() triple {
		if len(seen) == 0 || rng.IntN(4) == 0 {
			id := ids[rng.IntN(len(ids))]
			if r := m.recs[id]; r != nil {
				return triple{id, r.rec.State, r.rec.Owner, r.rec.Version}
			}
			return triple{id, runtime.StateProcessing, "o", 1}
		}
		return seen[rng.IntN(len(seen))]
	}
	states := []runtime.State{runtime.StateProcessing, runtime.StateSuccess, runtime.StateFailed, runtime.StateUnknown}
	durs := []time.Duration{0, 1, time.Millisecond, time.Second, time.Minute, time.Hour}
	for step := range steps {
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch k := rng.IntN(100); {
		case k < 10: // the clock
			switch j := rng.IntN(10); {
			case j < 6:
				now = now.Add(durs[rng.IntN(len(durs))])
			case j < 8:
				now = now.Add(-durs[rng.IntN(len(durs))])
			case j == 8: // far, past rebaseSpan, within a stamp's span of base
				now = base.Add(time.Duration(rng.IntN(3)-1) * (rebaseSpan + time.Hour))
			default:
				now = base.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			}
		case k < 35: // claim
			p := runtime.ClaimParams{ID: ids[rng.IntN(len(ids))], Fingerprint: []byte{byte('a' + rng.IntN(2))},
				Request: []byte(fmt.Sprint("rq", step)), Owner: fmt.Sprint("o", step), Lease: durs[rng.IntN(len(durs))],
				AcquireUnknown: rng.IntN(2) == 0}
			got, err := s.Claim(ctx, p)
			want, _ := m.claim(now, p)
			if err != nil || got.Claimed != want.Claimed || !r19Same(got.Record, want.Record) {
				t.Fatalf("%s: Claim(%v, fp %s, lease %v):\nstore %+v %v\nmodel %+v", where, p.ID, p.Fingerprint, p.Lease, got, err, want)
			}
			remember(got.Record)
		case k < 60: // transition, often from a stale triple
			tr := pick()
			p := runtime.TransitionParams{ID: tr.id, From: tr.st, Owner: tr.own, Version: tr.v, To: states[rng.IntN(len(states))],
				NewOwner: fmt.Sprint("n", step), Lease: durs[rng.IntN(len(durs))], TTL: durs[rng.IntN(len(durs))],
				Response: []byte(fmt.Sprint("rs", step)), Note: fmt.Sprint("note", step%3), ResponseOmitted: rng.IntN(5) == 0}
			if rng.IntN(2) == 0 {
				p.Token = fmt.Sprint("t", rng.IntN(20))
			}
			got, err := s.Transition(ctx, p)
			want, werr := m.transition(now, p)
			if got != want || !errors.Is(err, werr) && err != werr {
				t.Fatalf("%s: Transition(%+v): store %d %v, model %d %v", where, tr, got, err, want, werr)
			}
			if werr == nil {
				remember(m.recs[tr.id].rec)
			}
		case k < 70: // renew
			tr := pick()
			lease := durs[rng.IntN(len(durs))]
			got, err := s.Renew(ctx, runtime.RenewParams{ID: tr.id, State: tr.st, Owner: tr.own, Version: tr.v, Lease: lease})
			var want time.Time
			var werr error
			if r := m.held(tr.id, tr.st, tr.own, tr.v); r != nil {
				r.rec.LeaseExpiresAt, r.rec.UpdatedAt = r19Add(now, lease), now
				want = r.rec.LeaseExpiresAt
			} else {
				werr = runtime.ErrLeaseLost
			}
			if !got.Equal(want) || !errors.Is(err, werr) && err != werr {
				t.Fatalf("%s: Renew(%+v): store %v %v, model %v %v", where, tr, got, err, want, werr)
			}
		case k < 78: // release
			tr := pick()
			err := s.Release(ctx, runtime.ReleaseParams{ID: tr.id, State: tr.st, Owner: tr.own, Version: tr.v})
			var werr error
			if m.held(tr.id, tr.st, tr.own, tr.v) != nil {
				delete(m.recs, tr.id)
			} else {
				werr = runtime.ErrLeaseLost
			}
			if !errors.Is(err, werr) && err != werr {
				t.Fatalf("%s: Release(%+v): store %v, model %v", where, tr, err, werr)
			}
		case k < 86: // acquire pending
			p := runtime.AcquireParams{Owner: fmt.Sprint("rc", step), Lease: durs[rng.IntN(len(durs))], Limit: rng.IntN(4), MaxAttempts: int32(rng.IntN(3))}
			if rng.IntN(3) == 0 {
				p.Operations = []string{"Op2"}
			}
			got, err := s.AcquirePending(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var due []*r19Rec
			for _, r := range m.recs {
				if len(p.Operations) > 0 && !slices.Contains(p.Operations, r.rec.ID.Operation) {
					continue
				}
				le := r.rec.LeaseExpiresAt
				switch {
				case r.rec.State == runtime.StateProcessing && !le.IsZero() && !le.After(now):
				case r.rec.State == runtime.StateUnknown && !le.After(now) && (p.MaxAttempts <= 0 || r.rec.Attempts < p.MaxAttempts):
				default:
					continue
				}
				due = append(due, r)
			}
			order := func(a, b runtime.Record) int {
				// The store's order: a lease of none (zero) first.
				ka, kb := a.LeaseExpiresAt, b.LeaseExpiresAt
				switch {
				case ka.IsZero() && !kb.IsZero():
					return -1
				case !ka.IsZero() && kb.IsZero():
					return 1
				}
				if c := ka.Compare(kb); c != 0 {
					return c
				}
				return a.CreatedAt.Compare(b.CreatedAt)
			}
			slices.SortFunc(due, func(a, b *r19Rec) int { return order(a.rec, b.rec) })
			n := len(due)
			if p.Limit > 0 {
				n = min(n, p.Limit)
			}
			if len(got) != n {
				t.Fatalf("%s: AcquirePending(%+v) took %d records, model %d due", where, p, len(got), n)
			}
			var dueText []string
			for _, x := range due {
				dueText = append(dueText, fmt.Sprintf("%v %s lease %v created %v", x.rec.ID, x.rec.State, x.rec.LeaseExpiresAt, x.rec.CreatedAt))
			}
			before := make([]runtime.Record, len(due)) // as they were: the loop below changes them
			for i, x := range due {
				before[i] = x.rec
			}
			for i, g := range got {
				r := m.recs[g.ID]
				j := slices.IndexFunc(before, func(b runtime.Record) bool { return b.ID == g.ID })
				if r == nil || j < 0 || order(before[j], before[i]) != 0 {
					d := dueText
					var gs []string
					for _, x := range got {
						gs = append(gs, fmt.Sprintf("%v lease(before) ? created %v", x.ID, x.CreatedAt))
					}
					t.Fatalf("%s: AcquirePending(limit %d) took %v (#%d), not the model's #%d due %v (now %v)\nmodel due:\n%s\nstore took:\n%s",
						where, p.Limit, g.ID, i, i, due[i].rec.ID, now, strings.Join(d, "\n"), strings.Join(gs, "\n"))
				}
				r.rec.State, r.rec.Owner, r.rec.Version, r.rec.Token = runtime.StateUnknown, p.Owner, m.next(), ""
				r.rec.LeaseExpiresAt, r.rec.UpdatedAt = r19Add(now, p.Lease), now
				r.rec.Attempts++
				if !r19Same(g, r.rec) {
					t.Fatalf("%s: AcquirePending:\nstore %+v\nmodel %+v", where, g, r.rec)
				}
				remember(g)
			}
		case k < 93: // sweep
			limit := rng.IntN(3)
			n, err := s.Sweep(ctx, limit)
			if err != nil {
				t.Fatal(err)
			}
			due := 0
			for _, r := range m.recs {
				if (r.rec.State == runtime.StateSuccess || r.rec.State == runtime.StateFailed) && !r.rec.ExpiresAt.After(now) {
					due++
				}
			}
			want := due
			if limit > 0 {
				want = min(due, limit)
			}
			if n != want {
				t.Fatalf("%s: Sweep(%d) = %d, model has %d due", where, limit, n, due)
			}
			// Which ones went is the store's order: follow it.
			for id, r := range m.recs {
				if _, err := s.Get(ctx, id); errors.Is(err, runtime.ErrNotFound) {
					if !(r.rec.State == runtime.StateSuccess || r.rec.State == runtime.StateFailed) || r.rec.ExpiresAt.After(now) {
						t.Fatalf("%s: Sweep removed %v, not due: %+v", where, id, r.rec)
					}
					delete(m.recs, id)
				}
			}
		default: // list
			p := runtime.ListParams{States: states[:1+rng.IntN(4)], Limit: 1 + rng.IntN(10)}
			if rng.IntN(2) == 0 {
				a := ids[rng.IntN(len(ids))]
				p.After = &a
			}
			if rng.IntN(3) == 0 {
				p.LeaseFree = true
			}
			got, err := s.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var want []runtime.Record
			for _, r := range m.recs {
				rec := r.rec
				rec.StoreNow = now
				if (p.After == nil || p.After.Less(rec.ID)) && p.Matches(&rec) {
					want = append(want, rec)
				}
			}
			slices.SortFunc(want, func(a, b runtime.Record) int {
				return cmp.Or(cmp.Compare(a.ID.Scope, b.ID.Scope), cmp.Compare(a.ID.Operation, b.ID.Operation), cmp.Compare(a.ID.Key, b.ID.Key))
			})
			want = want[:min(len(want), p.Limit)]
			if len(got) != len(want) {
				t.Fatalf("%s: List(%+v): %d records, model %d", where, p, len(got), len(want))
			}
			for i := range got {
				if !r19Same(got[i], want[i]) {
					t.Fatalf("%s: List #%d:\nstore %+v\nmodel %+v", where, i, got[i], want[i])
				}
			}
		}
		// Every record, and no other.
		for _, id := range ids {
			got, err := s.Get(ctx, id)
			r := m.recs[id]
			switch {
			case r == nil && !errors.Is(err, runtime.ErrNotFound):
				t.Fatalf("%s: Get(%v) = %+v, %v; the model has none", where, id, got, err)
			case r != nil && (err != nil || !r19Same(got, r.rec)):
				t.Fatalf("%s: Get(%v):\nstore %+v %v\nmodel %+v", where, id, got, err, r.rec)
			}
		}
		if s.Len() != len(m.recs) {
			t.Fatalf("%s: Len %d, model %d", where, s.Len(), len(m.recs))
		}
	}
}
