package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// lateClaim is a store whose claims are applied at once but answered
// after delay (a starved machine, a slow network), and whose first
// renewals fail (failRenewals of them) as an unreachable store's do.
type lateClaim struct {
	runtime.Store
	delay        time.Duration
	failRenewals int32
	renewals     atomic.Int32
}

func (s *lateClaim) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	time.Sleep(s.delay)
	return res, err
}

func (s *lateClaim) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.renewals.Add(1) <= s.failRenewals {
		return time.Time{}, errors.New("renew: the store is unreachable")
	}
	return s.Store.Renew(ctx, p)
}

// A late start that cannot be confirmed ran nothing: the call gives its
// claim back, so that a retry runs the effect at once rather than wait a
// whole lease on a claim no one works on (DoTx's savepoint retry waited
// on its own transaction's claim so: "a caller never waits for its own
// transaction"). Schedule: the claim is applied at once and answered a
// 0.92 lease later (past the lease rule's margin, so the call confirms
// its lease first); the confirming renewal fails; a retry follows at
// once, told not to wait, while the claim's lease has some 150 ms to run.
// Before, the retry was told ErrInProgress.
func TestLateStartNotConfirmedReleasesItsClaim(t *testing.T) {
	const lease = 2 * time.Second
	mem := memstore.New()
	store := &lateClaim{Store: mem, delay: lease * 92 / 100, failRenewals: 1}
	rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	var runs atomic.Int32
	call := runtime.Call[reviewReq, string]{Operation: "LateStart.Release", Key: "k", Request: reviewReq{1},
		Effect: func(context.Context, reviewReq) (string, error) { runs.Add(1); return "done", nil }}
	_, err = runtime.Do(ctx, rt, call)
	if err == nil || !strings.Contains(err.Error(), "the effect did not run") {
		t.Fatalf("first call: %v, want the late start's failure", err)
	}
	if runs.Load() != 0 {
		t.Fatalf("the effect ran %d times on an unconfirmed late start", runs.Load())
	}
	id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key}
	if rec, err := mem.Get(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("after the unconfirmed late start the record is %s (version %d, owner %q), %v; want it released", rec.State, rec.Version, rec.Owner, err)
	}
	store.delay = 0
	got, err := runtime.Do(ctx, rt, call)
	if err != nil || got != "done" || runs.Load() != 1 {
		t.Fatalf("a retry at once: %q, %v (%d effects); want the effect run once", got, err, runs.Load())
	}
}

// A late start that cannot be confirmed on a record taken over (an
// earlier attempt may have acted) keeps the record: releasing it would
// forget that attempt. It is left to its lease, as before.
func TestLateStartNotConfirmedKeepsATakenOverRecord(t *testing.T) {
	const lease = 300 * time.Millisecond
	mem := memstore.New()
	ctx := reviewCtx()
	id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "LateStart.Takeover", Key: "k"}
	// A worker that died holding the claim: its lease expires.
	if _, err := mem.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "dead", Lease: lease / 3}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease / 2)
	store := &lateClaim{Store: mem, delay: lease, failRenewals: 1}
	rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	call := runtime.Call[reviewReq, string]{Operation: id.Operation, Key: id.Key, Request: reviewReq{1},
		Fingerprint: []byte("fp"),
		Effect:      func(context.Context, reviewReq) (string, error) { runs.Add(1); return "done", nil }}
	_, err = runtime.Do(ctx, rt, call)
	if err == nil || !strings.Contains(err.Error(), "the effect did not run") {
		t.Fatalf("takeover: %v, want the late start's failure", err)
	}
	rec, err := mem.Get(ctx, id)
	if err != nil || rec.Takeovers == 0 {
		t.Fatalf("after an unconfirmed late start on a taken-over record: %+v, %v; want the record kept, taken over", rec, err)
	}
	if runs.Load() != 0 {
		t.Fatalf("the effect ran %d times", runs.Load())
	}
}
