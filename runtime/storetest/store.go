package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// RunStore checks a store's primitives directly.
func RunStore(t *testing.T, newStore NewStore) {
	runCases(t, newStore, []testCase{
		{"ClaimNew", testClaimNew},
		{"ClaimLiveIsNotClaimed", testClaimLive},
		{"TransitionIsCAS", testTransitionCAS},
		{"RenewKeepsVersion", testRenew},
		{"ReleaseIsCAS", testRelease},
		{"TakeoverAfterLeaseExpiry", testTakeover},
		{"TakeoverBySameOwnerFencesTheOldVersion", testTakeoverSameOwner},
		{"SweepSparesARecordClaimedAgain", testSweepReclaimed},
		{"TakeoverRace", testTakeoverRace},
		{"ClaimRace", testClaimRace},
		{"TakeoverNeedsSameFingerprint", testTakeoverFingerprint},
		{"FinishedRecordExpires", testTTLExpiry},
		{"SweepOnlyExpiredFinished", testSweep},
		{"AcquireUnknownViaClaim", testAcquireUnknown},
		{"ClaimIfVersion", testClaimIfVersion},
		{"AcquirePendingIsExclusive", testAcquirePending},
		{"AcquirePendingMaxAttempts", testAcquirePendingMaxAttempts},
		{"AcquirePendingByOperation", testAcquirePendingByOperation},
		{"IdentitiesDoNotCollide", testIdentitiesDoNotCollide},
		{"LargeAndBinaryPayloads", testPayloads},
		{"List", testList},
	})
}

func ident(t *testing.T, key string) runtime.Identity {
	return runtime.Identity{Scope: uniqueScope(t), Operation: "Test.Op", Key: key}
}

func claimParams(id runtime.Identity, owner string, lease time.Duration) runtime.ClaimParams {
	return runtime.ClaimParams{ID: id, Fingerprint: []byte("fp-1"), Request: []byte(`{"n":1}`), Owner: owner, Lease: lease}
}

func mustClaim(t *testing.T, s runtime.Store, p runtime.ClaimParams) runtime.Record {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim(%v): %v", p.ID, err)
	}
	if !res.Claimed {
		t.Fatalf("Claim(%v) by %s: not claimed; record is %s owned by %q", p.ID, p.Owner, res.Record.State, res.Record.Owner)
	}
	return res.Record
}

func testClaimNew(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	rec := mustClaim(t, s, claimParams(id, "w1", longLease))
	if rec.State != runtime.StateProcessing || rec.Owner != "w1" || rec.Version < 1 || rec.Takeovers != 0 {
		t.Fatalf("claimed record = %+v", rec)
	}
	if rec.ID != id || !bytes.Equal(rec.Fingerprint, []byte("fp-1")) || !bytes.Equal(rec.Request, []byte(`{"n":1}`)) {
		t.Fatalf("claimed record does not hold the claim: %+v", rec)
	}
	if rec.StoreNow.IsZero() || !rec.LeaseLive() {
		t.Fatalf("lease not live at store time: lease %v, now %v", rec.LeaseExpiresAt, rec.StoreNow)
	}
	if d := rec.LeaseExpiresAt.Sub(rec.StoreNow); d < longLease-5*time.Second || d > longLease+time.Second {
		t.Fatalf("lease is %v from store now, want about %v", d, longLease)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != rec.State || got.Version != rec.Version || got.Owner != rec.Owner {
		t.Fatalf("Get = %+v, want the claimed record %+v", got, rec)
	}
	if _, err := s.Get(ctx, ident(t, "absent")); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("Get(absent) error = %v, want ErrNotFound", err)
	}
}

func testClaimLive(t *testing.T, s runtime.Store) {
	id := ident(t, "k1")
	first := mustClaim(t, s, claimParams(id, "w1", longLease))
	res, err := s.Claim(context.Background(), claimParams(id, "w2", longLease))
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed {
		t.Fatal("second claim of a live record succeeded")
	}
	if res.Record.Owner != "w1" || res.Record.Version != first.Version || res.Record.State != runtime.StateProcessing || !res.Record.LeaseLive() {
		t.Fatalf("second claim returned %+v, want the first owner's live record", res.Record)
	}
	other := claimParams(id, "w3", longLease)
	other.Fingerprint = []byte("fp-2")
	res, err = s.Claim(context.Background(), other)
	if err != nil || res.Claimed || !bytes.Equal(res.Record.Fingerprint, []byte("fp-1")) {
		t.Fatalf("claim with another fingerprint: claimed=%v fp=%q err=%v", res.Claimed, res.Record.Fingerprint, err)
	}
}

func testTransitionCAS(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	rec := mustClaim(t, s, claimParams(id, "w1", longLease))
	ok := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1", Version: rec.Version,
		To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(`"done"`)}
	stale := []struct {
		name string
		mod  func(*runtime.TransitionParams)
	}{
		{"wrong owner", func(p *runtime.TransitionParams) { p.Owner = "w2" }},
		{"old version", func(p *runtime.TransitionParams) { p.Version-- }},
		{"newer version", func(p *runtime.TransitionParams) { p.Version++ }},
		{"wrong state", func(p *runtime.TransitionParams) { p.From = runtime.StateUnknown }},
		{"other key", func(p *runtime.TransitionParams) { p.ID.Key = "other" }},
	}
	for _, st := range stale {
		p := ok
		st.mod(&p)
		if _, err := s.Transition(ctx, p); !errors.Is(err, runtime.ErrLeaseLost) {
			t.Errorf("%s: Transition error = %v, want ErrLeaseLost", st.name, err)
		}
	}
	if got, _ := s.Get(ctx, id); got.State != runtime.StateProcessing || got.Version != rec.Version {
		t.Fatalf("rejected transitions changed the record: %+v", got)
	}
	v, err := s.Transition(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if v <= rec.Version {
		t.Fatalf("new version = %d, want above %d", v, rec.Version)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != runtime.StateSuccess || got.Version != v || !bytes.Equal(got.Response, []byte(`"done"`)) || got.Owner != "" {
		t.Fatalf("after transition: %+v", got)
	}
	if !got.LeaseExpiresAt.IsZero() {
		t.Errorf("finished record keeps a lease: %v", got.LeaseExpiresAt)
	}
	if d := got.ExpiresAt.Sub(got.StoreNow); d < 59*time.Minute || d > time.Hour+time.Minute {
		t.Errorf("ExpiresAt is %v from now, want about 1h", d)
	}
	// The same transition again is stale now.
	if _, err := s.Transition(ctx, ok); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("replayed transition error = %v, want ErrLeaseLost", err)
	}
	// A claim on a finished record does not claim.
	res, err := s.Claim(ctx, claimParams(id, "w2", longLease))
	if err != nil || res.Claimed || res.Record.State != runtime.StateSuccess {
		t.Fatalf("claim of finished record: claimed=%v state=%s err=%v", res.Claimed, res.Record.State, err)
	}
}

func testRenew(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	rec := mustClaim(t, s, claimParams(id, "w1", shortLease))
	until, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.StateProcessing, Owner: "w1", Version: rec.Version, Lease: longLease})
	if err != nil {
		t.Fatal(err)
	}
	if !until.After(rec.LeaseExpiresAt) {
		t.Fatalf("renewed lease %v is not after %v", until, rec.LeaseExpiresAt)
	}
	sleep(2 * shortLease)
	got, _ := s.Get(ctx, id)
	if got.Version != rec.Version || !got.LeaseLive() {
		t.Fatalf("after renew: version %d (want %d), lease live %v", got.Version, rec.Version, got.LeaseLive())
	}
	if res, _ := s.Claim(ctx, claimParams(id, "w2", longLease)); res.Claimed {
		t.Fatal("a renewed lease was taken over")
	}
	if _, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.StateProcessing, Owner: "w2", Version: rec.Version, Lease: longLease}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("renew by another owner: %v, want ErrLeaseLost", err)
	}
}

func testRelease(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	rec := mustClaim(t, s, claimParams(id, "w1", longLease))
	p := runtime.ReleaseParams{ID: id, State: runtime.StateProcessing, Owner: "w1", Version: rec.Version}
	bad := p
	bad.Version++
	if err := s.Release(ctx, bad); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale release: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("after release Get error = %v, want ErrNotFound", err)
	}
	if err := s.Release(ctx, p); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("second release: %v, want ErrLeaseLost", err)
	}
	mustClaim(t, s, claimParams(id, "w2", longLease))
}

func testTakeover(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	old := mustClaim(t, s, claimParams(id, "dead", shortLease))
	sleep(2 * shortLease)
	rec := mustClaim(t, s, claimParams(id, "w2", longLease))
	if rec.Owner != "w2" || rec.Version <= old.Version || rec.Takeovers != old.Takeovers+1 || rec.State != runtime.StateProcessing {
		t.Fatalf("takeover record = %+v (old version %d)", rec, old.Version)
	}
	// The dead owner wakes up: every write it tries is rejected.
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "dead", Version: old.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte("stale")}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale owner's completion: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.StateProcessing, Owner: "dead", Version: old.Version, Lease: longLease}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale owner's renew: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, runtime.ReleaseParams{ID: id, State: runtime.StateProcessing, Owner: "dead", Version: old.Version}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale owner's release: %v, want ErrLeaseLost", err)
	}
	got, _ := s.Get(ctx, id)
	if got.Owner != "w2" || got.Version != rec.Version || got.State != runtime.StateProcessing {
		t.Fatalf("stale writes changed the record: %+v", got)
	}
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w2", Version: rec.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(`1`)}); err != nil {
		t.Fatalf("new owner's completion: %v", err)
	}
}

// testTakeoverSameOwner: two calls of one process write under one owner
// id; when the second takes over the first's expired claim, only the
// version tells their writes apart, and every write of the first (renew,
// completion, release) must be refused. (One takeover more than the first
// claim's: a store wrapper that resends a write, as a client does after a
// lost reply, can make the first claim take over its own claim already
// when the resend comes after the short lease, on a loaded machine.)
func testTakeoverSameOwner(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	old := mustClaim(t, s, claimParams(id, "proc", shortLease))
	sleep(2 * shortLease)
	rec := mustClaim(t, s, claimParams(id, "proc", longLease))
	if rec.Version <= old.Version || rec.Takeovers != old.Takeovers+1 {
		t.Fatalf("takeover by the same owner: %+v (old version %d)", rec, old.Version)
	}
	if _, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.StateProcessing, Owner: "proc", Version: old.Version, Lease: longLease}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("the first call's renew, same owner, old version: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "proc", Version: old.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte("stale")}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("the first call's completion, same owner, old version: %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, runtime.ReleaseParams{ID: id, State: runtime.StateProcessing, Owner: "proc", Version: old.Version}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("the first call's release, same owner, old version: %v, want ErrLeaseLost", err)
	}
	got, err := s.Get(ctx, id)
	if err != nil || got.Version != rec.Version || got.State != runtime.StateProcessing || !got.LeaseExpiresAt.Equal(rec.LeaseExpiresAt) {
		t.Fatalf("stale writes changed the record: %+v, %v (want version %d, lease until %v)", got, err, rec.Version, rec.LeaseExpiresAt)
	}
}

func testTakeoverRace(t *testing.T, s runtime.Store) {
	id := ident(t, "k1")
	mustClaim(t, s, claimParams(id, "dead", shortLease))
	sleep(2 * shortLease)
	const n = 32
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Claim(context.Background(), claimParams(id, fmt.Sprintf("w%d", i), longLease))
			if err != nil {
				errs <- err
				return
			}
			if res.Claimed {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w := wins.Load(); w != 1 {
		t.Fatalf("%d of %d contenders took over the expired lease, want exactly 1", w, n)
	}
}

func testClaimRace(t *testing.T, s runtime.Store) {
	id := ident(t, "k1")
	const n = 64
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := s.Claim(context.Background(), claimParams(id, fmt.Sprintf("w%d", i), longLease))
			if err != nil {
				errs <- err
				return
			}
			if res.Claimed {
				wins.Add(1)
			} else if res.Record.State != runtime.StateProcessing || res.Record.Owner == "" {
				errs <- fmt.Errorf("losing claim saw %+v", res.Record)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w := wins.Load(); w != 1 {
		t.Fatalf("%d of %d concurrent claims of a new key succeeded, want exactly 1", w, n)
	}
}

func testTakeoverFingerprint(t *testing.T, s runtime.Store) {
	id := ident(t, "k1")
	mustClaim(t, s, claimParams(id, "dead", shortLease))
	sleep(2 * shortLease)
	p := claimParams(id, "w2", longLease)
	p.Fingerprint = []byte("fp-2")
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed {
		t.Fatal("an expired lease was taken over by a claim with another fingerprint")
	}
	if !bytes.Equal(res.Record.Fingerprint, []byte("fp-1")) {
		t.Fatalf("record fingerprint = %q", res.Record.Fingerprint)
	}
}

func finish(t *testing.T, s runtime.Store, rec runtime.Record, to runtime.State, ttl time.Duration) int64 {
	t.Helper()
	v, err := s.Transition(context.Background(), runtime.TransitionParams{ID: rec.ID, From: rec.State, Owner: rec.Owner,
		Version: rec.Version, To: to, TTL: ttl, Response: []byte(`"r"`)})
	if err != nil {
		t.Fatalf("Transition(%v -> %s): %v", rec.ID, to, err)
	}
	return v
}

func testTTLExpiry(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	// A claim within the TTL must be refused; a loaded machine may take
	// longer than the short TTL between the finish and the claim, and
	// then the claim may win: such a try proves nothing, another key
	// tries again.
	var id runtime.Identity
	for try := 0; ; try++ {
		id = ident(t, fmt.Sprintf("k%d", try))
		rec := mustClaim(t, s, claimParams(id, "w1", longLease))
		start := time.Now()
		finish(t, s, rec, runtime.StateSuccess, shortTTL)
		res, _ := s.Claim(ctx, claimParams(id, "w2", longLease))
		if !res.Claimed {
			break
		}
		if took := time.Since(start); took < shortTTL || try == 2 {
			t.Fatalf("a finished record was claimed before its TTL passed (%v after the finish, TTL %v)", took, shortTTL)
		}
	}
	sleep(shortTTL + 100*time.Millisecond)
	p := claimParams(id, "w2", longLease)
	p.Fingerprint = []byte("fp-new") // an expired record is gone: any payload may use the key again
	again := mustClaim(t, s, p)
	// (The expired record may have been swept meanwhile by a parallel
	// test, so the version may start over.)
	if again.Takeovers != 0 || again.State != runtime.StateProcessing || !bytes.Equal(again.Fingerprint, []byte("fp-new")) {
		t.Fatalf("claim after TTL = %+v", again)
	}
	if len(again.Response) != 0 {
		t.Fatalf("claim after TTL kept the old response %q", again.Response)
	}
}

func testSweep(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	done := mustClaim(t, s, claimParams(ident(t, "done"), "w1", longLease))
	finish(t, s, done, runtime.StateSuccess, shortTTL)
	failed := mustClaim(t, s, claimParams(ident(t, "failed"), "w1", longLease))
	finish(t, s, failed, runtime.StateFailed, shortTTL)
	kept := mustClaim(t, s, claimParams(ident(t, "kept"), "w1", longLease))
	finish(t, s, kept, runtime.StateSuccess, time.Hour)
	live := mustClaim(t, s, claimParams(ident(t, "live"), "w1", longLease))
	unknown := mustClaim(t, s, claimParams(ident(t, "unknown"), "w1", longLease))
	finish(t, s, unknown, runtime.StateUnknown, 0)
	expiredLease := mustClaim(t, s, claimParams(ident(t, "expired-lease"), "w1", shortLease))
	sleep(shortTTL + 100*time.Millisecond)

	// Sweep in small batches until nothing is left; other tests may add
	// expired records to a shared store meanwhile, so bound the loop.
	for i := 0; i < 1000; i++ {
		n, err := s.Sweep(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Fatalf("Sweep(limit 2) deleted %d records", n)
		}
		if n == 0 {
			break
		}
	}
	for _, gone := range []runtime.Record{done, failed} {
		if _, err := s.Get(ctx, gone.ID); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("expired %s survived the sweep: %v", gone.ID.Key, err)
		}
	}
	for _, r := range []runtime.Record{kept, live, unknown, expiredLease} {
		if _, err := s.Get(ctx, r.ID); err != nil {
			t.Errorf("%s was swept: %v", r.ID.Key, err)
		}
	}
}

// testSweepReclaimed: a record finished with a short TTL and claimed again
// once the TTL passed is live (PROCESSING): a sweep after that, which may
// still find the first life's expiry in an index, must not delete it.
func testSweepReclaimed(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "again")
	first := mustClaim(t, s, claimParams(id, "w1", longLease))
	finish(t, s, first, runtime.StateSuccess, shortTTL)
	sleep(shortTTL + 100*time.Millisecond)
	second := mustClaim(t, s, claimParams(id, "w2", longLease))
	if second.Version <= first.Version || second.State != runtime.StateProcessing {
		t.Fatalf("claim after the TTL: %+v", second)
	}
	for i := 0; i < 1000; i++ {
		n, err := s.Sweep(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	got, err := s.Get(ctx, id)
	if err != nil || got.Version != second.Version || got.Owner != "w2" {
		t.Fatalf("the record claimed again after its TTL: %+v, %v; want it kept (version %d, owner w2)", got, err, second.Version)
	}
}

func testAcquireUnknown(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	rec := mustClaim(t, s, claimParams(id, "w1", longLease))
	v := finish(t, s, rec, runtime.StateUnknown, 0)
	// A plain claim never takes an UNKNOWN record.
	if res, _ := s.Claim(ctx, claimParams(id, "w2", longLease)); res.Claimed || res.Record.State != runtime.StateUnknown {
		t.Fatalf("plain claim on UNKNOWN: claimed=%v state=%s", res.Claimed, res.Record.State)
	}
	p := claimParams(id, "w2", shortLease)
	p.AcquireUnknown = true
	got := mustClaim(t, s, p)
	if got.State != runtime.StateUnknown || got.Owner != "w2" || got.Version <= v || got.Attempts != 0 || !got.LeaseLive() {
		t.Fatalf("acquired UNKNOWN = %+v", got)
	}
	p.Owner = "w3"
	if res, _ := s.Claim(ctx, p); res.Claimed {
		// Only a claim the store made before the first lease ended (by
		// its own clock) is a fault: on a starved machine the lease may
		// have run out before this claim was sent.
		if res.Record.StoreNow.Before(got.LeaseExpiresAt) {
			t.Fatalf("UNKNOWN record acquired twice while the first lease is live (store time %v, lease until %v)", res.Record.StoreNow, got.LeaseExpiresAt)
		}
		t.Logf("the second claim came after the first lease ended (store time %v, lease until %v): the machine stalled", res.Record.StoreNow, got.LeaseExpiresAt)
		return
	}
	sleep(2 * shortLease)
	got3 := mustClaim(t, s, p)
	if got3.Owner != "w3" || got3.Attempts != 0 || got3.Version <= got.Version {
		t.Fatalf("re-acquired UNKNOWN = %+v", got3)
	}
	// The converging owner finishes it.
	finish(t, s, got3, runtime.StateSuccess, time.Hour)
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateUnknown, Owner: "w2", Version: got.Version, To: runtime.StateFailed, TTL: time.Hour}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale converger: %v, want ErrLeaseLost", err)
	}
}

// testClaimIfVersion: a claim that names a version (ClaimParams.IfVersion,
// what Resolve decided on) takes an existing record only at that version:
// an expired PROCESSING record, and an UNKNOWN one with AcquireUnknown, are
// returned untouched at another version (a worker took the record over, ran
// the effect and left it UNKNOWN since it was read), and taken at their
// own. With no record the claim creates one, as without it.
func testClaimIfVersion(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	untouched := func(what string, p runtime.ClaimParams, want runtime.Record) {
		t.Helper()
		res, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Claimed || res.Record.Version != want.Version || res.Record.Owner != want.Owner || res.Record.State != want.State {
			t.Fatalf("%s, IfVersion %d: claimed=%v, record %s owned by %q at version %d; want it untouched (%s, %q, version %d)",
				what, p.IfVersion, res.Claimed, res.Record.State, res.Record.Owner, res.Record.Version, want.State, want.Owner, want.Version)
		}
	}

	id := ident(t, "processing")
	rec := mustClaim(t, s, claimParams(id, "w1", shortLease))
	sleep(2 * shortLease)
	p := claimParams(id, "w2", longLease)
	p.IfVersion = rec.Version + 1
	untouched("an expired PROCESSING record at another version", p, rec)
	p.IfVersion = rec.Version
	if got := mustClaim(t, s, p); got.Owner != "w2" || got.Takeovers != 1 || got.Version <= rec.Version {
		t.Fatalf("takeover at the version read = %+v", got)
	}

	id = ident(t, "unknown")
	rec = mustClaim(t, s, claimParams(id, "w1", longLease))
	v := finish(t, s, rec, runtime.StateUnknown, 0)
	p = claimParams(id, "w2", longLease)
	p.AcquireUnknown, p.IfVersion = true, rec.Version // the version before the transition
	untouched("an UNKNOWN record changed since it was read", p, runtime.Record{State: runtime.StateUnknown, Owner: "", Version: v})
	p.IfVersion = v
	if got := mustClaim(t, s, p); got.State != runtime.StateUnknown || got.Owner != "w2" || got.Version <= v {
		t.Fatalf("acquisition at the version read = %+v", got)
	}

	id = ident(t, "absent")
	p = claimParams(id, "w1", longLease)
	p.IfVersion = 12345
	if got := mustClaim(t, s, p); got.State != runtime.StateProcessing || got.Owner != "w1" {
		t.Fatalf("a claim naming a version where no record is = %+v, want a new record", got)
	}
}

func testAcquirePending(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	scope := uniqueScope(t)
	// Acquisition is store-wide: a unique operation keeps parallel tests on a
	// shared store out of each other's records.
	op := "Test.Op." + scope
	const n = 40
	want := make(map[runtime.Identity]bool)
	for i := range n {
		id := runtime.Identity{Scope: scope, Operation: op, Key: fmt.Sprintf("k%d", i)}
		rec := mustClaim(t, s, claimParams(id, "w1", shortLease))
		if i%2 == 0 {
			finish(t, s, rec, runtime.StateUnknown, 0)
		}
		want[id] = true
	}
	live := runtime.Identity{Scope: scope, Operation: op, Key: "live"}
	mustClaim(t, s, claimParams(live, "w1", longLease))
	sleep(2 * shortLease)

	var mu sync.Mutex
	seen := make(map[runtime.Identity]string)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("reconciler-%d", w)
			for range 1000 {
				recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: owner, Lease: longLease, Limit: 3, Operations: []string{op}})
				if err != nil {
					errs <- err
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range recs {
					if r.ID.Scope != scope {
						continue // another test's record in a shared store
					}
					if prev, dup := seen[r.ID]; dup {
						errs <- fmt.Errorf("%s acquired by %s and %s", r.ID.Key, prev, owner)
					}
					seen[r.ID] = owner
					if r.State != runtime.StateUnknown || r.Owner != owner || r.Attempts != 1 || !r.LeaseLive() {
						errs <- fmt.Errorf("acquired record %+v", r)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for id := range want {
		if _, ok := seen[id]; !ok {
			t.Errorf("%s was never acquired", id.Key)
		}
	}
	if _, ok := seen[live]; ok {
		t.Error("a PROCESSING record with a live lease was acquired")
	}
	// Acquired records are held: a second pass finds none of them.
	recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "late", Lease: longLease, Limit: 100, Operations: []string{op}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID.Scope == scope {
			t.Errorf("%s acquired again while held", r.ID.Key)
		}
	}
}

func testAcquirePendingMaxAttempts(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	id.Operation += "." + id.Scope // acquisition is store-wide: keep to this test's records
	rec := mustClaim(t, s, claimParams(id, "w1", longLease))
	v := finish(t, s, rec, runtime.StateUnknown, 0)
	acquire := func() *runtime.Record {
		for range 100 {
			recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "r", Lease: longLease, Limit: 50, MaxAttempts: 2, Operations: []string{id.Operation}})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				return nil
			}
			for i := range recs {
				if recs[i].ID == id {
					return &recs[i]
				}
			}
		}
		return nil
	}
	for attempt := int32(1); attempt <= 2; attempt++ {
		r := acquire()
		if r == nil {
			t.Fatalf("attempt %d: record not acquired", attempt)
		}
		if r.Attempts != attempt {
			t.Fatalf("attempts = %d, want %d", r.Attempts, attempt)
		}
		// Back off: leave it UNKNOWN with no lease.
		v, _ = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateUnknown, Owner: "r", Version: r.Version, To: runtime.StateUnknown})
	}
	if r := acquire(); r != nil {
		t.Fatalf("record acquired after MaxAttempts: %+v", r)
	}
	got, _ := s.Get(ctx, id)
	if got.State != runtime.StateUnknown || got.Version != v {
		t.Fatalf("record after MaxAttempts = %+v", got)
	}
	// A duplicate's inline query takes the record (its attempts are kept:
	// an inline ask is not one), finds that the effect did not happen, and
	// runs it again: a Transition to PROCESSING starts a new run, whose
	// outcome gets every attempt (review r28, F4: it inherited the used
	// ones, and an UNKNOWN it ended in was never acquired nor reported).
	p := claimParams(id, "w2", longLease)
	p.AcquireUnknown = true
	held := mustClaim(t, s, p)
	if held.Attempts != 2 {
		t.Fatalf("UNKNOWN acquired by a claim: attempts = %d, want 2 (kept)", held.Attempts)
	}
	v, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateUnknown, Owner: "w2", Version: held.Version,
		To: runtime.StateProcessing, NewOwner: "w2", Lease: longLease})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, id); got.State != runtime.StateProcessing || got.Attempts != 0 {
		t.Fatalf("after a Transition to PROCESSING (the effect run again): %s, attempts %d, want PROCESSING, 0", got.State, got.Attempts)
	}
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w2", Version: v, To: runtime.StateUnknown}); err != nil {
		t.Fatal(err)
	}
	r := acquire()
	if r == nil || r.Attempts != 1 {
		t.Fatalf("the second run's UNKNOWN: acquired %+v, want it acquired with attempts 1", r)
	}
}

func testIdentitiesDoNotCollide(t *testing.T, s runtime.Store) {
	base := uniqueScope(t)
	ids := []runtime.Identity{
		{Scope: base + "a", Operation: "b:c", Key: "d"},
		{Scope: base + "a:b", Operation: "c", Key: "d"},
		{Scope: base + "a", Operation: "b", Key: "c:d"},
		{Scope: base + "a}", Operation: "{b", Key: "d"},
		{Scope: base + "a|b", Operation: "c", Key: "d"},
		{Scope: base + "a", Operation: "b|c", Key: "d"},
		{Scope: base + "a\\", Operation: "b", Key: "c"},
		{Scope: base + "a", Operation: "\\b", Key: "c"},
		{Scope: base + "", Operation: "ab", Key: "c"},
		{Scope: base + "a", Operation: "b", Key: "c"},
	}
	for i, id := range ids {
		p := claimParams(id, fmt.Sprintf("w%d", i), longLease)
		p.Fingerprint = []byte(fmt.Sprintf("fp-%d", i))
		mustClaim(t, s, p)
	}
	for i, id := range ids {
		got, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("fp-%d", i); string(got.Fingerprint) != want || got.ID != id {
			t.Errorf("record of %+v has fingerprint %q and id %+v", id, got.Fingerprint, got.ID)
		}
	}
}

func testPayloads(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	id := ident(t, "k1")
	req := bytes.Repeat([]byte{0, 1, 2, 0xff, '"', '\\'}, 10000)
	p := claimParams(id, "w1", longLease)
	p.Request = req
	p.Fingerprint = []byte{0, 0xff, 0x10}
	rec := mustClaim(t, s, p)
	resp := bytes.Repeat([]byte("\x00response\xfe"), 6000)
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1", Version: rec.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: resp}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Request, req) || !bytes.Equal(got.Response, resp) || !bytes.Equal(got.Fingerprint, p.Fingerprint) {
		t.Fatalf("payloads did not round-trip: request %d/%d bytes, response %d/%d bytes", len(got.Request), len(req), len(got.Response), len(resp))
	}
}

func testAcquirePendingByOperation(t *testing.T, s runtime.Store) {
	ctx := context.Background()
	scope := uniqueScope(t)
	opA := "OpA." + scope
	opB := "OpB." + scope
	for _, op := range []string{opA, opB} {
		id := runtime.Identity{Scope: scope, Operation: op, Key: "k"}
		rec := mustClaim(t, s, claimParams(id, "w1", longLease))
		finish(t, s, rec, runtime.StateUnknown, 0)
	}
	var got []runtime.Record
	for range 100 {
		recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "r", Lease: longLease, Limit: 50, Operations: []string{opA}})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		got = append(got, recs...)
	}
	if len(got) != 1 || got[0].ID.Operation != opA {
		t.Fatalf("acquired %d records for [%s]: %+v", len(got), opA, got)
	}
	rec, err := s.Get(ctx, runtime.Identity{Scope: scope, Operation: opB, Key: "k"})
	if err != nil || rec.Owner != "" || rec.Attempts != 0 {
		t.Fatalf("record of another operation was touched: %+v, %v", rec, err)
	}
}
