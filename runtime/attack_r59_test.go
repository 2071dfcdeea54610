package runtime_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// README ("Errors" / leaving calls): "A call that leaves after its claim
// was granted and before its effect ran (runtime.Goexit in an observer of
// the claim, in the log handler, in an inline query; ...) gives the claim
// back on its way out: released, or recorded UNKNOWN when an earlier
// attempt may have acted on the record (a takeover, an UNKNOWN record
// acquired for its query)." And CHANGELOG Unreleased, Changed: "A record an
// earlier attempt may have acted on (UNKNOWN, or taken over) is still left
// to its lease, even once a query has said the effect did not happen: the
// next call takes it over and asks again."
//
// A call takes over an expired PROCESSING claim (a worker that died, or is
// still on its way to the downstream), its query says "did not happen",
// and an observer of EventReconciled calls runtime.Goexit before the
// effect starts. The record is released (deleted), not recorded UNKNOWN:
// the next call claims it fresh and runs the effect without asking the
// query, where the earlier attempt may have acted.
func TestR59GoexitAfterNotHappenedReleasesTakenOverRecord(t *testing.T) {
	const lease = 3 * time.Second
	s := memstore.New()
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0),
		runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
			if e.Kind == runtime.EventReconciled {
				goruntime.Goexit()
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := runtime.Identity{Operation: "R59.Charge", Key: "k"}
	fp, enc, err := runtime.EncodeRequest(rt, "req", nil)
	if err != nil {
		t.Fatal(err)
	}
	// An earlier attempt: claimed, lease expired (it may have acted).
	if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: enc, Owner: "earlier-worker", Lease: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)

	var ran, asked atomic.Int32
	call := runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
		Effect: func(context.Context, string) (int, error) { ran.Add(1); return 1, nil },
		Query: func(context.Context, string) (int, runtime.Outcome, error) {
			asked.Add(1)
			return 0, runtime.OutcomeNotHappened, nil
		}}
	exited := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { exited <- !returned }()
		_, _ = runtime.Do(ctx, rt, call)
		returned = true
	}()
	if !<-exited {
		t.Fatal("the observer's Goexit did not run")
	}
	rec, err := s.Get(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		// What the next call does with it.
		rt2, _ := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0))
		before := asked.Load()
		_, derr := runtime.Do(ctx, rt2, call)
		t.Fatalf("the taken-over record was released (deleted) when the call left after the query; the next call ran the effect (%d run(s), query asked %d time(s) by it, err %v) where the earlier attempt may have acted",
			ran.Load(), asked.Load()-before, derr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record: %s owner %q live %v", rec.State, rec.Owner, rec.LeaseLive())
	if rec.State != runtime.StateUnknown {
		t.Fatalf("record %s, want UNKNOWN", rec.State)
	}
}

// The same door by the caller's cancellation: the caller's context ends
// after the query said "did not happen" and before the effect starts (here
// the observer of EventReconciled cancels it, as a caller's deadline
// would). execute releases the taken-over record ("the caller's context
// ended before the effect ran"): the next call runs the effect without
// asking the query. Not covered word for word by the README's Goexit
// sentence; the CHANGELOG's rule ("A record an earlier attempt may have
// acted on ... is still left to its lease, even once a query has said the
// effect did not happen") is written for the late start only.
func TestR59CancelAfterNotHappenedReleasesTakenOverRecord(t *testing.T) {
	const lease = 3 * time.Second
	s := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0),
		runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
			if e.Kind == runtime.EventReconciled {
				cancel()
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	id := runtime.Identity{Operation: "R59.Charge", Key: "k"}
	fp, enc, err := runtime.EncodeRequest(rt, "req", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(bg, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: enc, Owner: "earlier-worker", Lease: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	var ran, asked atomic.Int32
	call := runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
		Effect: func(context.Context, string) (int, error) { ran.Add(1); return 1, nil },
		Query: func(context.Context, string) (int, runtime.Outcome, error) {
			asked.Add(1)
			return 0, runtime.OutcomeNotHappened, nil
		}}
	_, err = runtime.Do(ctx, rt, call)
	t.Logf("first call: %v (effect ran %d)", err, ran.Load())
	rec, gerr := s.Get(bg, id)
	if errors.Is(gerr, runtime.ErrNotFound) {
		rt2, _ := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0))
		before := asked.Load()
		_, derr := runtime.Do(bg, rt2, call)
		t.Fatalf("the taken-over record was released when the caller's context ended after the query; the next call ran the effect (%d run(s), query asked %d time(s) by it, err %v)",
			ran.Load(), asked.Load()-before, derr)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	t.Logf("record: %s owner %q live %v", rec.State, rec.Owner, rec.LeaseLive())
	if rec.State != runtime.StateUnknown {
		t.Fatalf("record %s, want UNKNOWN (the next call asks the query again)", rec.State)
	}
}

// The README's other case: "an UNKNOWN record acquired for its query". A
// first call's effect times out (UNKNOWN); a second call acquires the record
// for its query, which says "did not happen", and an observer of
// EventReconciled calls runtime.Goexit before the effect.
func TestR59GoexitAfterNotHappenedReleasesUnknownRecord(t *testing.T) {
	const lease = 3 * time.Second
	s := memstore.New()
	var exit atomic.Bool
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0),
		runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
			if e.Kind == runtime.EventReconciled && exit.Load() {
				goruntime.Goexit()
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := runtime.Identity{Operation: "R59.Charge", Key: "k"}
	var ran, asked atomic.Int32
	first := runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
		Effect: func(context.Context, string) (int, error) { ran.Add(1); return 0, context.DeadlineExceeded }}
	if _, err := runtime.Do(ctx, rt, first); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v", err)
	}
	call := runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
		Effect: func(context.Context, string) (int, error) { ran.Add(1); return 1, nil },
		Query: func(context.Context, string) (int, runtime.Outcome, error) {
			asked.Add(1)
			return 0, runtime.OutcomeNotHappened, nil
		}}
	exit.Store(true)
	exited := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { exited <- !returned }()
		_, _ = runtime.Do(ctx, rt, call)
		returned = true
	}()
	if !<-exited {
		t.Fatal("the observer's Goexit did not run")
	}
	exit.Store(false)
	rec, err := s.Get(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		before := asked.Load()
		_, derr := runtime.Do(ctx, rt, call)
		t.Fatalf("the UNKNOWN record acquired for the query was released (deleted) when the call left; the next call ran the effect (%d run(s) in all, query asked %d time(s) by it, err %v)",
			ran.Load(), asked.Load()-before, derr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record: %s owner %q live %v", rec.State, rec.Owner, rec.LeaseLive())
	if rec.State != runtime.StateUnknown {
		t.Fatalf("record %s, want UNKNOWN", rec.State)
	}
}
