package memstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/storetest"
)

// handClock is a clock moved by the test.
type handClock struct{ now time.Time }

func (c *handClock) Now() time.Time { return c.now }

func claim(t *testing.T, s *Store, id runtime.Identity, fp string, lease time.Duration) runtime.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), runtime.ClaimParams{
		ID: id, Fingerprint: []byte(fp), Request: []byte("req-" + fp), Owner: "w1", Lease: lease,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func succeed(t *testing.T, s *Store, rec runtime.Record, ttl time.Duration) {
	t.Helper()
	_, err := s.Transition(context.Background(), runtime.TransitionParams{
		ID: rec.ID, From: rec.State, Owner: rec.Owner, Version: rec.Version,
		To: runtime.StateSuccess, TTL: ttl, Response: []byte("resp"), Note: "note", Token: "tok",
		ResponseOmitted: true,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSlotReuse checks that a record that takes the slot (or the index
// entry) of a released, swept or expired record carries nothing of it over.
func TestSlotReuse(t *testing.T) {
	ctx := context.Background()
	a := runtime.Identity{Operation: "Op", Key: "a"}
	b := runtime.Identity{Operation: "Op", Key: "b"}
	cases := []struct {
		name string
		// free ends a's first record; the next claim is of next.
		free func(t *testing.T, s *Store, c *handClock, rec runtime.Record)
		next runtime.Identity
	}{
		{"release", func(t *testing.T, s *Store, _ *handClock, rec runtime.Record) {
			if err := s.Release(ctx, runtime.ReleaseParams{ID: rec.ID, State: rec.State, Owner: rec.Owner, Version: rec.Version}); err != nil {
				t.Fatal(err)
			}
		}, b},
		{"sweep", func(t *testing.T, s *Store, c *handClock, rec runtime.Record) {
			succeed(t, s, rec, time.Minute)
			c.now = c.now.Add(2 * time.Minute)
			if n, err := s.Sweep(ctx, 0); err != nil || n != 1 {
				t.Fatalf("Sweep = %d, %v; want 1", n, err)
			}
		}, b},
		{"ttl passed", func(t *testing.T, s *Store, c *handClock, rec runtime.Record) {
			succeed(t, s, rec, time.Minute)
			c.now = c.now.Add(2 * time.Minute)
		}, a},
		{"acquired", func(t *testing.T, s *Store, c *handClock, rec runtime.Record) {
			c.now = c.now.Add(time.Minute)
			got, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "r", Lease: time.Second, Limit: 1})
			if err != nil || len(got) != 1 {
				t.Fatalf("AcquirePending = %v, %v", got, err)
			}
			succeed(t, s, got[0], time.Minute)
			c.now = c.now.Add(2 * time.Minute)
			if n, err := s.Sweep(ctx, 0); err != nil || n != 1 {
				t.Fatalf("Sweep = %d, %v; want 1", n, err)
			}
		}, b},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &handClock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
			s := New(WithClock(c.Now))
			tc.free(t, s, c, claim(t, s, a, "fp-a", time.Second).Record)
			res := claim(t, s, tc.next, "fp-next", 10*time.Second)
			if !res.Claimed {
				t.Fatalf("claim of %v not granted: %+v", tc.next, res.Record)
			}
			r := res.Record
			want := runtime.Record{
				ID: tc.next, Fingerprint: []byte("fp-next"), State: runtime.StateProcessing, Owner: "w1",
				Version: r.Version, LeaseExpiresAt: c.now.Add(10 * time.Second), Request: []byte("req-fp-next"),
				CreatedAt: c.now, UpdatedAt: c.now, StoreNow: c.now,
			}
			if !sameRecord(r, want) {
				t.Fatalf("record in a reused place:\n got %+v\nwant %+v", r, want)
			}
			if n := s.Len(); n != 1 {
				t.Fatalf("Len = %d, want 1", n)
			}
		})
	}
}

// sameRecord compares records, times with Equal.
func sameRecord(a, b runtime.Record) bool {
	return a.ID == b.ID && string(a.Fingerprint) == string(b.Fingerprint) && a.State == b.State &&
		a.Owner == b.Owner && a.Version == b.Version && a.LeaseExpiresAt.Equal(b.LeaseExpiresAt) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && string(a.Request) == string(b.Request) &&
		string(a.Response) == string(b.Response) && (a.Response == nil) == (b.Response == nil) &&
		a.ResponseOmitted == b.ResponseOmitted && a.Note == b.Note && a.Token == b.Token &&
		a.Takeovers == b.Takeovers && a.Attempts == b.Attempts && a.CreatedAt.Equal(b.CreatedAt) &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.StoreNow.Equal(b.StoreNow) &&
		a.ExpiresAt.IsZero() == b.ExpiresAt.IsZero() && a.LeaseExpiresAt.IsZero() == b.LeaseExpiresAt.IsZero()
}

// TestTransitionInvalidState checks that a transition to a state that is
// not one of the four is refused and changes nothing, as PostgreSQL's check
// constraint refuses it.
func TestTransitionInvalidState(t *testing.T) {
	ctx := context.Background()
	for _, to := range []runtime.State{"", "DONE", "success"} {
		t.Run(string(to), func(t *testing.T) {
			s := New()
			id := runtime.Identity{Operation: "Op", Key: "k"}
			rec := claim(t, s, id, "fp", time.Minute).Record
			_, err := s.Transition(ctx, runtime.TransitionParams{
				ID: id, From: rec.State, Owner: rec.Owner, Version: rec.Version, To: to, TTL: time.Minute,
			})
			if err == nil || errors.Is(err, runtime.ErrLeaseLost) {
				t.Fatalf("Transition to %q: err = %v, want an invalid state error", to, err)
			}
			got, err := s.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != rec.State || got.Version != rec.Version {
				t.Fatalf("record changed: %s v%d, was %s v%d", got.State, got.Version, rec.State, rec.Version)
			}
		})
	}
}

// TestClockReadings checks that the record's times read back as the
// store's clock gave them, for clocks that start at the zero time, jump by
// centuries (the store moves its epoch) or go back, and that expiry is
// decided on them. Times more than 292 years from the clock's reading are
// kept as the nearest that is not: still before (or after) it.
func TestClockReadings(t *testing.T) {
	ctx := context.Background()
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name          string
		first, second time.Time // the clock at the first claim, then at the second
		exact         bool      // the first record's times read back exactly after the move
	}{
		{"steady", day, day.Add(time.Hour), true},
		{"past the ttl", day, day.Add(2 * time.Hour), true},
		{"centuries forward", day, day.AddDate(250, 0, 0), true},
		{"centuries back", day.AddDate(250, 0, 0), day, true},
		{"from zero time", time.Time{}, day, false},
		{"near the limits", time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"back to the start", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &handClock{now: tc.first}
			s := New(WithClock(c.Now))
			a := runtime.Identity{Operation: "Op", Key: "a"}
			rec := claim(t, s, a, "fp", time.Minute).Record
			if !rec.CreatedAt.Equal(tc.first) || !rec.LeaseExpiresAt.Equal(tc.first.Add(time.Minute)) {
				t.Fatalf("first claim: created %v lease %v, want %v and a minute later", rec.CreatedAt, rec.LeaseExpiresAt, tc.first)
			}
			succeed(t, s, rec, time.Hour)
			ttl := tc.first.Add(time.Hour)
			c.now = tc.second
			b := runtime.Identity{Operation: "Op", Key: "b"}
			recB := claim(t, s, b, "fp", time.Minute).Record
			if !recB.CreatedAt.Equal(tc.second) || !recB.LeaseExpiresAt.Equal(tc.second.Add(time.Minute)) {
				t.Fatalf("second claim: created %v lease %v, want %v and a minute later", recB.CreatedAt, recB.LeaseExpiresAt, tc.second)
			}
			got, err := s.Get(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			if !got.LeaseExpiresAt.IsZero() || got.ExpiresAt.IsZero() || got.ExpiresAt.After(got.StoreNow) != ttl.After(tc.second) {
				t.Fatalf("first record after the clock moved to %v: expires %v lease %v; want %v, no lease", tc.second, got.ExpiresAt, got.LeaseExpiresAt, ttl)
			}
			if tc.exact && (!got.CreatedAt.Equal(tc.first) || !got.ExpiresAt.Equal(ttl)) {
				t.Fatalf("first record after the clock moved: created %v expires %v; want %v, %v", got.CreatedAt, got.ExpiresAt, tc.first, ttl)
			}
			// Swept exactly when its TTL passed by the clock.
			wantSwept := !ttl.After(tc.second)
			n, err := s.Sweep(ctx, 0)
			if err != nil || (n == 1) != wantSwept {
				t.Fatalf("Sweep at %v of a record expiring %v = %d, %v", tc.second, ttl, n, err)
			}
			// The second record's lease holds until a minute after its claim.
			for _, step := range []struct {
				d    time.Duration
				free bool
			}{{59 * time.Second, false}, {time.Minute, true}} {
				c.now = tc.second.Add(step.d)
				res := claim(t, s, b, "fp", time.Minute)
				if res.Claimed != step.free {
					t.Fatalf("claim %v after the second: granted %v, want %v", step.d, res.Claimed, step.free)
				}
			}
		})
	}
}

// TestMonotonicTimes checks that on the process clock a record's times
// carry the monotonic clock, so that leases compare by it and not by a
// wall clock that can be set.
func TestMonotonicTimes(t *testing.T) {
	s := New()
	rec := claim(t, s, runtime.Identity{Operation: "Op", Key: "k"}, "fp", time.Minute).Record
	for name, tm := range map[string]time.Time{"LeaseExpiresAt": rec.LeaseExpiresAt, "CreatedAt": rec.CreatedAt, "StoreNow": rec.StoreNow} {
		if tm == tm.Round(0) {
			t.Errorf("%s = %v has no monotonic clock reading", name, tm)
		}
	}
	if d := rec.LeaseExpiresAt.Sub(rec.StoreNow); d != time.Minute {
		t.Errorf("lease = %v after the claim, want 1m0s", d)
	}
}

// colliding returns a store whose index keeps two bits of each hash, so
// that identities share chains.
func colliding(opts ...Option) *Store {
	s := New(opts...)
	s.mask = 3
	return s
}

// TestConformanceColliding runs the conformance suite on a store whose
// identities share the index's chains.
func TestConformanceColliding(t *testing.T) {
	storetest.Run(t, func(t *testing.T) runtime.Store { return colliding() })
}

// TestIndexChains removes records from the head, the middle and the end of
// the index's chains and checks that every other record is still found,
// and that freed slots are taken again.
func TestIndexChains(t *testing.T) {
	ctx := context.Background()
	const n = 40
	id := func(i int) runtime.Identity { return runtime.Identity{Operation: "Op", Key: "k" + strconv.Itoa(i)} }
	orders := map[string]func(i int) int{
		"first to last": func(i int) int { return i },
		"last to first": func(i int) int { return n - 1 - i },
		"odd then even": func(i int) int { return (i*2)%n + (i*2)/n },
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			s := colliding()
			recs := make([]runtime.Record, n)
			for i := range n {
				recs[i] = claim(t, s, id(i), "fp", time.Minute).Record
			}
			gone := make(map[int]bool)
			for k := range n {
				i := order(k)
				r := recs[i]
				if err := s.Release(ctx, runtime.ReleaseParams{ID: r.ID, State: r.State, Owner: r.Owner, Version: r.Version}); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
				gone[i] = true
				for j := range n {
					got, err := s.Get(ctx, id(j))
					switch {
					case gone[j] && !errors.Is(err, runtime.ErrNotFound):
						t.Fatalf("after releasing %d: Get(%d) = %v, %v; want not found", i, j, got.ID, err)
					case !gone[j] && (err != nil || got.ID != id(j) || got.Version != recs[j].Version):
						t.Fatalf("after releasing %d: Get(%d) = %v v%d, %v; want v%d", i, j, got.ID, got.Version, err, recs[j].Version)
					}
				}
				if s.Len() != n-len(gone) {
					t.Fatalf("Len = %d, want %d", s.Len(), n-len(gone))
				}
				if k == n/2 { // claim the released half again, in freed slots
					for j := range gone {
						recs[j] = claim(t, s, id(j), "fp", time.Minute).Record
						delete(gone, j)
					}
				}
			}
			if s.slab.used != n {
				t.Fatalf("%d slots used for %d records at most", s.slab.used, n)
			}
		})
	}
}
