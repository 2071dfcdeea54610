package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

func claimP(id runtime.Identity, owner string, lease time.Duration) runtime.ClaimParams {
	return runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte("req"), Owner: owner, Lease: lease}
}

func mustClaim(t *testing.T, s runtime.Store, p runtime.ClaimParams) runtime.Record {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil || !res.Claimed {
		t.Fatalf("Claim(%v): claimed=%v err=%v", p.ID, res.Claimed, err)
	}
	return res.Record
}

func mustFinish(t *testing.T, s runtime.Store, rec runtime.Record, to runtime.State, ttl time.Duration) {
	t.Helper()
	if _, err := s.Transition(context.Background(), runtime.TransitionParams{ID: rec.ID, From: rec.State, Owner: rec.Owner,
		Version: rec.Version, To: to, TTL: ttl, Response: []byte("resp")}); err != nil {
		t.Fatal(err)
	}
}

// TestExpiry checks the TTL behaviour: finished records carry a Redis
// expiry of TTL+grace, PROCESSING and UNKNOWN records none; between
// ExpiresAt and the Redis expiry Sweep deletes a record and counts it;
// after Redis expired a record, Sweep only drops its index entry and counts
// nothing; PROCESSING (live or expired lease) and UNKNOWN records survive.
//
// The grace is 2 s, so that a process or a Redis starved for a while
// (bench/ciload.sh: 300 ms between the write and the read at a load of
// 19) still reads the record inside it; each Redis TTL is judged against
// the time gone since its write.
func TestExpiry(t *testing.T) {
	c := standaloneClient(t)
	const grace = 2 * time.Second
	s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithExpiryGrace(grace))
	ctx := context.Background()
	id := func(k string) runtime.Identity { return runtime.Identity{Scope: "expiry", Operation: "T.Op", Key: k} }
	rkey := func(k string) string { r, _, _ := redisstore.KeysOf(s, id(k)); return r }

	swept := mustClaim(t, s, claimP(id("swept"), "w", time.Minute))
	written := time.Now()
	mustFinish(t, s, swept, runtime.StateSuccess, 100*time.Millisecond)
	expired := mustClaim(t, s, claimP(id("expired"), "w", time.Minute))
	mustFinish(t, s, expired, runtime.StateFailed, 100*time.Millisecond)
	kept := mustClaim(t, s, claimP(id("kept"), "w", time.Minute))
	mustFinish(t, s, kept, runtime.StateSuccess, time.Hour)
	mustClaim(t, s, claimP(id("live"), "w", time.Minute))
	mustClaim(t, s, claimP(id("lapsed"), "w", 50*time.Millisecond))
	unknown := mustClaim(t, s, claimP(id("unknown"), "w", time.Minute))
	mustFinish(t, s, unknown, runtime.StateUnknown, time.Hour)

	for k, want := range map[string][2]time.Duration{
		"swept": {grace, grace + 100*time.Millisecond}, "kept": {time.Hour, time.Hour + grace},
	} {
		ttl, err := c.PTTL(ctx, rkey(k)).Result()
		// The TTL ran down since its write (kept's, written later, less).
		if since := time.Since(written); err != nil || ttl < want[0]-since || ttl > want[1] {
			t.Fatalf("%s: Redis TTL %v (%v), want within %v less the %v since the write", k, ttl, err, want, since)
		}
	}
	for _, k := range []string{"live", "lapsed", "unknown"} {
		if ttl, err := c.PTTL(ctx, rkey(k)).Result(); err != nil || ttl != -1 {
			t.Fatalf("%s: Redis TTL %v (%v), want none (-1)", k, ttl, err)
		}
	}

	time.Sleep(time.Until(written.Add(200 * time.Millisecond))) // past ExpiresAt, inside grace
	if got, err := s.Get(ctx, id("swept")); err != nil || got.State != runtime.StateSuccess || !got.ExpiresAt.Before(got.StoreNow) {
		t.Fatalf("expired record inside grace: %+v, %v", got, err)
	}
	// Sweep one record: the sweep counts what it deleted.
	n, err := s.Sweep(ctx, 1)
	if err != nil || n != 1 {
		t.Fatalf("Sweep(1) = %d, %v; want 1", n, err)
	}
	n2, err := s.Sweep(ctx, 0)
	if err != nil || n+n2 != 2 {
		t.Fatalf("Sweep = %d then %d, %v; want 2 in all", n, n2, err)
	}
	for _, k := range []string{"swept", "expired"} {
		if _, err := s.Get(ctx, id(k)); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("%s after sweep: %v", k, err)
		}
	}

	// A record Redis expires by itself leaves only its index entry behind.
	gone := mustClaim(t, s, claimP(id("gone"), "w", time.Minute))
	mustFinish(t, s, gone, runtime.StateSuccess, 10*time.Millisecond)
	_, _, expiryIdx := redisstore.KeysOf(s, id("gone"))
	time.Sleep(grace + 200*time.Millisecond)
	if n, err := c.Exists(ctx, rkey("gone")).Result(); err != nil || n != 0 {
		t.Fatalf("Redis did not expire the record: exists=%d %v", n, err)
	}
	if _, err := c.ZScore(ctx, expiryIdx, rkey("gone")).Result(); err != nil {
		t.Fatalf("index entry of the expired record: %v", err)
	}
	if n, err := s.Sweep(ctx, 10); err != nil || n != 0 {
		t.Fatalf("Sweep after Redis expiry = %d, %v; want 0", n, err)
	}
	if _, err := c.ZScore(ctx, expiryIdx, rkey("gone")).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("Sweep left the stale index entry: %v", err)
	}

	for _, k := range []string{"kept", "live", "lapsed", "unknown"} {
		if _, err := s.Get(ctx, id(k)); err != nil {
			t.Fatalf("%s was removed: %v", k, err)
		}
	}
	if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != 4 {
		t.Fatalf("CheckIndexes = %d, %v; want 4 records", n, err)
	}
}

// TestResentScripts runs claim and transition twice with the same nonce, as
// go-redis does when it resends a command whose reply was lost: the second
// run reports the first one's effect instead of a foreign live record or a
// lost lease, and changes nothing.
func TestResentScripts(t *testing.T) {
	s := newStore(t, standaloneClient(t), redisstore.WithPrefix(testPrefix(t)))
	ctx := context.Background()
	id := runtime.Identity{Scope: "resent", Operation: "T.Op", Key: "k"}
	p := claimP(id, "w", time.Minute)
	first, err := redisstore.ClaimWithNonce(ctx, s, p, "n1")
	if err != nil || !first.Claimed {
		t.Fatal(first, err)
	}
	again, err := redisstore.ClaimWithNonce(ctx, s, p, "n1")
	if err != nil || !again.Claimed || again.Record.Version != first.Record.Version {
		t.Fatalf("resent claim = %+v, %v; want claimed at version %d", again, err, first.Record.Version)
	}
	// Another call of the same owner (another goroutine) is not claimed.
	other, err := redisstore.ClaimWithNonce(ctx, s, p, "n2")
	if err != nil || other.Claimed {
		t.Fatalf("other call's claim = %+v, %v; want not claimed", other, err)
	}
	tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w", Version: first.Record.Version,
		To: runtime.StateSuccess, TTL: time.Hour, Response: []byte("r")}
	v, err := redisstore.TransitionWithNonce(ctx, s, tp, "t1")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := redisstore.TransitionWithNonce(ctx, s, tp, "t1")
	if err != nil || v2 != v {
		t.Fatalf("resent transition = %d, %v; want %d", v2, err, v)
	}
	if _, err := redisstore.TransitionWithNonce(ctx, s, tp, "t2"); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("another stale transition: %v, want ErrLeaseLost", err)
	}
	got, err := s.Get(ctx, id)
	if err != nil || got.Version != v || got.State != runtime.StateSuccess {
		t.Fatalf("record = %+v, %v", got, err)
	}
	if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != 1 {
		t.Fatalf("CheckIndexes = %d, %v", n, err)
	}

	// A release, resent: the second run reports the first one's deletion,
	// also once another claim has made the key a new record; another call
	// of the same release is refused.
	rid := runtime.Identity{Scope: "resent", Operation: "T.Op", Key: "released"}
	u := mustClaim(t, s, claimP(rid, "w", time.Minute))
	rp := runtime.ReleaseParams{ID: rid, State: runtime.StateProcessing, Owner: "w", Version: u.Version}
	if err := redisstore.ReleaseWithNonce(ctx, s, rp, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.ReleaseWithNonce(ctx, s, rp, "r1"); err != nil {
		t.Fatalf("resent release: %v, want nil", err)
	}
	mustClaim(t, s, claimP(rid, "w2", time.Minute))
	if err := redisstore.ReleaseWithNonce(ctx, s, rp, "r1"); err != nil {
		t.Fatalf("resent release after a new claim: %v, want nil", err)
	}
	if err := redisstore.ReleaseWithNonce(ctx, s, rp, "r2"); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("another stale release: %v, want ErrLeaseLost", err)
	}
	if got, err := s.Get(ctx, rid); err != nil || got.Owner != "w2" {
		t.Fatalf("the new claim = %+v, %v; want it kept", got, err)
	}
	if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != 2 {
		t.Fatalf("CheckIndexes = %d, %v", n, err)
	}
}

// TestResentAcquire runs the acquire script twice with the same nonce, as
// go-redis does when it resends a command whose reply was lost (a read
// timeout while the server was busy): the second run must answer with the
// records the first one acquired, not acquire others nor leave the first
// run's records held by the caller, who never learnt of them, until their
// lease ends (with an attempt used: under MaxAttempts 1 never acquired
// again).
func TestResentAcquire(t *testing.T) {
	s := newStore(t, standaloneClient(t), redisstore.WithPrefix(testPrefix(t)), redisstore.WithBuckets(1))
	ctx := context.Background()
	for i := range 3 {
		u := mustClaim(t, s, claimP(runtime.Identity{Scope: "resent", Operation: "T.Op", Key: fmt.Sprint("u", i)}, "w", time.Minute))
		mustFinish(t, s, u, runtime.StateUnknown, 0)
	}
	p := runtime.AcquireParams{Owner: "reconciler", Lease: time.Hour, Limit: 2, MaxAttempts: 1}
	first, err := redisstore.AcquireWithNonce(ctx, s, p, "a1")
	if err != nil || len(first) != 2 {
		t.Fatalf("AcquirePending = %d records, %v; want 2", len(first), err)
	}
	again, err := redisstore.AcquireWithNonce(ctx, s, p, "a1")
	if err != nil {
		t.Fatal(err)
	}
	key := func(r runtime.Record) string { return fmt.Sprint(r.ID.Key, "@", r.Version) }
	if !slices.Equal(slices.Sorted(slices.Values(mapRecords(first, key))), slices.Sorted(slices.Values(mapRecords(again, key)))) {
		t.Fatalf("resent acquire = %v, want the first run's %v", mapRecords(again, key), mapRecords(first, key))
	}
	// Another call acquires the third record only.
	other, err := redisstore.AcquireWithNonce(ctx, s, p, "a2")
	if err != nil || len(other) != 1 || slices.ContainsFunc(first, func(r runtime.Record) bool { return r.ID == other[0].ID }) {
		t.Fatalf("another call = %v, %v; want the third record", mapRecords(other, key), err)
	}
	// Once a record acquired by the first run moves on, a late resend no
	// longer returns it; it never acquires a record that became due since.
	mustFinish(t, s, first[0], runtime.StateSuccess, time.Hour)
	u := mustClaim(t, s, claimP(runtime.Identity{Scope: "resent", Operation: "T.Op", Key: "u3"}, "w", time.Minute))
	mustFinish(t, s, u, runtime.StateUnknown, 0)
	late, err := redisstore.AcquireWithNonce(ctx, s, p, "a1")
	if err != nil || len(late) != 1 || late[0].ID != first[1].ID {
		t.Fatalf("late resend = %v, %v; want only %s", mapRecords(late, key), err, first[1].ID.Key)
	}
	if _, err := redisstore.CheckIndexes(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func mapRecords(rs []runtime.Record, f func(runtime.Record) string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// TestIndexesStayConsistent drives every transition and checks the pending
// and expiry indexes after each.
func TestIndexesStayConsistent(t *testing.T) {
	s := newStore(t, standaloneClient(t), redisstore.WithPrefix(testPrefix(t)))
	ctx := context.Background()
	check := func(want int) {
		t.Helper()
		if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != want {
			t.Fatalf("CheckIndexes = %d, %v; want %d records", n, err, want)
		}
	}
	id := runtime.Identity{Scope: "idx", Operation: "T.Op", Key: "k"}
	rec := mustClaim(t, s, claimP(id, "w", 50*time.Millisecond))
	check(1)
	if _, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: rec.State, Owner: "w", Version: rec.Version, Lease: 60 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	check(1)
	time.Sleep(100 * time.Millisecond)
	rec = mustClaim(t, s, claimP(id, "w2", time.Minute)) // takeover
	check(1)
	v, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w2", Version: rec.Version, To: runtime.StateUnknown})
	if err != nil {
		t.Fatal(err)
	}
	check(1)
	recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "r", Lease: time.Minute, Limit: 10})
	if err != nil || len(recs) != 1 || recs[0].Version <= v || recs[0].Attempts != 1 {
		t.Fatalf("AcquirePending = %+v, %v", recs, err)
	}
	check(1)
	v, err = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateUnknown, Owner: "r", Version: recs[0].Version,
		To: runtime.StateProcessing, NewOwner: "r", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check(1)
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "r", Version: v,
		To: runtime.StateFailed, TTL: time.Hour, Response: []byte("no")}); err != nil {
		t.Fatal(err)
	}
	check(1)
	id2 := runtime.Identity{Scope: "idx", Operation: "T.Op", Key: "k2"}
	rec2 := mustClaim(t, s, claimP(id2, "w", time.Minute))
	check(2)
	if err := s.Release(ctx, runtime.ReleaseParams{ID: id2, State: rec2.State, Owner: "w", Version: rec2.Version}); err != nil {
		t.Fatal(err)
	}
	check(1)
}

// TestExpiryIndexTrimmedByClaims checks that the expiry index stays bounded
// without Sweep: claims clear entries of records Redis expired.
func TestExpiryIndexTrimmedByClaims(t *testing.T) {
	c := standaloneClient(t)
	s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithBuckets(1), redisstore.WithExpiryGrace(0))
	ctx := context.Background()
	id := func(k string) runtime.Identity { return runtime.Identity{Scope: "trim", Operation: "T.Op", Key: k} }
	_, _, expiryIdx := redisstore.KeysOf(s, id("x"))
	// Ten records that expire 500 ms after they finish. On a loaded
	// machine writing them can take longer than that, and a claim among
	// them then trims the first ones already (series 17: 9 of 10): the
	// setup is measured and done again, under other keys, until it fits.
	const ttl = 500 * time.Millisecond
	for try := 0; ; try++ {
		start := time.Now()
		for i := range 10 {
			rec := mustClaim(t, s, claimP(id(fmt.Sprintf("%c%d", 'a'+i, try)), "w", time.Minute))
			mustFinish(t, s, rec, runtime.StateSuccess, ttl)
		}
		n, err := c.ZCard(ctx, expiryIdx).Result()
		if time.Since(start) >= ttl && try < 20 {
			if err := c.Del(ctx, expiryIdx).Err(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil || n != 10 {
			t.Fatalf("expiry index holds %d, %v; want 10", n, err)
		}
		break
	}
	time.Sleep(ttl + 100*time.Millisecond)
	for i := range 5 {
		mustClaim(t, s, claimP(id(string(rune('A'+i))), "w", time.Minute))
	}
	if n, err := c.ZCard(ctx, expiryIdx).Result(); err != nil || n != 0 {
		t.Fatalf("after 5 claims the expiry index holds %d, %v; want 0", n, err)
	}
	if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != 5 {
		t.Fatalf("CheckIndexes = %d, %v; want 5", n, err)
	}
}

// TestSweepSparesLiveRecordsWithStaleEntries: an expiry index entry that
// points at a record no longer finished (left by a store that failed half
// way, an older version, or a hand edit) must not make Sweep delete that
// record: a PROCESSING claim and an UNKNOWN record stay, and the stale
// entries are dropped.
func TestSweepSparesLiveRecordsWithStaleEntries(t *testing.T) {
	c := standaloneClient(t)
	s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithBuckets(1))
	ctx := context.Background()
	live := runtime.Identity{Scope: "stale", Operation: "T.Op", Key: "live"}
	unknown := runtime.Identity{Scope: "stale", Operation: "T.Op", Key: "unknown"}
	mustClaim(t, s, claimP(live, "w", time.Minute))
	mustFinish(t, s, mustClaim(t, s, claimP(unknown, "w", time.Minute)), runtime.StateUnknown, 0)
	before := map[runtime.Identity]runtime.Record{}
	for _, id := range []runtime.Identity{live, unknown} {
		rec, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = rec
		key, _, expiryIdx := redisstore.KeysOf(s, id)
		if err := c.ZAdd(ctx, expiryIdx, redis.Z{Score: 1, Member: key}).Err(); err != nil { // due long ago
			t.Fatal(err)
		}
	}
	n, err := s.Sweep(ctx, 100)
	if err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v; want 0 deleted", n, err)
	}
	for id, want := range before {
		if got, err := s.Get(ctx, id); err != nil || got.Version != want.Version || got.State != want.State {
			t.Fatalf("%s after Sweep: %+v, %v; want it kept (%s, version %d)", id.Key, got, err, want.State, want.Version)
		}
	}
	if n, err := redisstore.CheckIndexes(ctx, s); err != nil || n != 2 {
		t.Fatalf("CheckIndexes = %d, %v; want 2 records, no stale entry", n, err)
	}
}
