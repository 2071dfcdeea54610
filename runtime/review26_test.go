package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r26BlockingDoneCtx is a caller's context whose Done, once armed, blocks
// until release is closed (a context whose Done takes a lock a stalled
// goroutine holds, say); its Err works and says nil.
type r26BlockingDoneCtx struct {
	context.Context
	armed   *atomic.Bool
	release chan struct{}
}

func (c r26BlockingDoneCtx) Done() <-chan struct{} {
	if c.armed.Load() {
		<-c.release
	}
	return c.Context.Done()
}

// stalledPast reports whether the process stalled for margin or more while
// w watched (a machine with every core busy): a lease kept by renewals, and
// the lease rule's stop a tenth of a lease before expiry, hold only for a
// process that runs on time, so such a run is not counted (logged).
func stalledPast(t *testing.T, w *stall.Watch, margin time.Duration, what string) bool {
	t.Helper()
	if worst := w.Stop(); worst >= margin {
		t.Logf("%s, while the process stalled for up to %v (margin %v; the machine's load): not counted", what, worst, margin)
		return true
	}
	return false
}

// Row 25.37 (c): "no code of the caller's runs before the effect is
// stopped". The stop (effectCtx.cancelCause, on the renewals' goroutine)
// takes the effect context's mutex; making the context lazily
// (effectCtx.materialize, on whatever goroutine first calls the effect
// context's Done: a watcher the effect started, as pgx's ctxwatch or a
// context.WithTimeout the effect derives do) holds that same mutex while it
// calls context.WithCancelCause(callerCtx), i.e. the caller's Done. So the
// stop still waits on code of the caller's, only on another goroutine: a
// caller's Done that blocks holds the stop past the lease, while the
// effect's own loop, reading ctx.Err() (the caller's Err: the context is not
// made yet), keeps running.
// Schedule: lease 150 ms; A's effect starts a watcher (<-ctx.Done()), which
// blocks inside the caller's Done holding the effect context's lock; A's
// Renews fail; at ~135 ms A's round tries to stop the effect and blocks on
// the lock; A's lease expires at 150 ms; at 250 ms B takes over and runs the
// effect beside A's, which still sees ctx.Err() == nil.
func TestR26StopWaitsOnCallerDoneInWatcher(t *testing.T) {
	mem := memstore.New()
	var on atomic.Bool
	st := &r25OwnerRenewFails{Store: mem, owner: "r26-A", on: &on}
	rtA, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithOwner("r26-A"))
	if err != nil {
		t.Fatal(err)
	}
	rtB, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithOwner("r26-B"))
	if err != nil {
		t.Fatal(err)
	}
	starved := stall.Start()
	defer starved.Stop()
	var running, overlap atomic.Int32
	var armed atomic.Bool
	release := make(chan struct{})
	var released atomic.Bool
	unblock := func() {
		armed.Store(false)
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}
	defer unblock()
	t0 := time.Now()
	var aStopped atomic.Int64 // when A's effect saw its context end (ns since t0)
	effect := func(ctx context.Context, req string) (int, error) {
		me := running.Add(1)
		defer running.Add(-1)
		if me > 1 {
			overlap.Store(1)
		}
		t.Logf("effect starts at %v", time.Since(t0))
		if req == "A" {
			armed.Store(true)
			on.Store(true)
			go func() { <-ctx.Done() }() // a watcher, as a driver's ctxwatch
		}
		for i := 0; i < 120; i++ { // 600 ms
			if err := ctx.Err(); err != nil {
				if req == "A" {
					aStopped.Store(int64(time.Since(t0)))
				}
				t.Logf("%s's effect stopped at %v: %v", req, time.Since(t0), context.Cause(ctx))
				return 0, err
			}
			if running.Load() > 1 {
				overlap.Store(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s's effect ends at %v", req, time.Since(t0))
		return 1, nil
	}
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		ctx := r26BlockingDoneCtx{Context: context.Background(), armed: &armed, release: release}
		_, err := runtime.Do[string, int](ctx, rtA, runtime.Call[string, int]{Operation: "r26.done", Key: "k", Request: "A", Effect: effect})
		t.Logf("A: %v", err)
	}()
	time.Sleep(250 * time.Millisecond)
	_, err = runtime.Do(context.Background(), rtB, runtime.Call[string, int]{Operation: "r26.done", Key: "k", Request: "A", Effect: func(ctx context.Context, _ string) (int, error) {
		return effect(ctx, "B")
	}})
	t.Logf("B: %v", err)
	unblock()
	select {
	case <-doneA:
	case <-time.After(10 * time.Second):
		t.Fatalf("A's call did not return 10 s after the caller's Done was released")
	}
	if overlap.Load() != 0 && stalledPast(t, starved, 15*time.Millisecond, "A's effect ran beside B's") {
		return
	}
	if overlap.Load() != 0 {
		t.Fatalf("A's effect ran beside B's: the lease rule's stop waited on the effect context's lock, held by a goroutine blocked in the caller's Done while making the context (row 25.37 (c)); A's effect saw its context end at %v", time.Duration(aStopped.Load()))
	}
}

// r26TransitionDown fails every Transition once on (a store outage longer
// than the completion timeout).
type r26TransitionDown struct {
	runtime.Store
	on *atomic.Bool
}

func (s *r26TransitionDown) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.on.Load() {
		return 0, errors.New("r26: connection refused (transient)")
	}
	return s.Store.Transition(ctx, p)
}

// The same promise, through the answer's write: "The answer's write is
// retried through transient store errors, as a call's completion is", i.e.
// until the completion timeout. An outage that outlasts it on the record's
// last attempt leaves the record acquired with its attempts at MaxAttempts,
// never written: when its lease runs out no reconciler acquires it again,
// and neither its give-up (note, EventReconcileGaveUp) nor, when the query
// answered SUCCESS, its convergence ever happens. Schedule: MaxAttempts 1,
// lease 50 ms, completion timeout 50 ms; the query answers (cannot tell /
// succeeded); every Transition fails for the pass; after the outage, passes
// acquire nothing.
func TestR26AnswerWriteOutageDropsLastAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    runtime.Outcome
	}{{"cannot-tell", runtime.OutcomeUnknown}, {"succeeded", runtime.OutcomeSucceeded}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memstore.New()
			var on atomic.Bool
			st := &r26TransitionDown{Store: mem, on: &on}
			obs := &r25Events{}
			rt, err := runtime.New(st, runtime.WithObserver(obs), runtime.WithCompletionTimeout(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			op := "r26.outage." + tc.name
			r24unknown(t, rt, op, "k")
			if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
				return 7, tc.o, nil
			}, runtime.QueryOptions{}); err != nil {
				t.Fatal(err)
			}
			r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(50*time.Millisecond), runtime.ReconcileOwner("r26-rec"))
			if err != nil {
				t.Fatal(err)
			}
			on.Store(true)
			st1, err := r.RunOnce(context.Background())
			t.Logf("pass 1 (outage): %+v, %v", st1, err)
			on.Store(false)
			time.Sleep(80 * time.Millisecond)
			for i := 0; i < 3; i++ {
				st2, err := r.RunOnce(context.Background())
				t.Logf("pass %d: %+v, %v", i+2, st2, err)
				time.Sleep(60 * time.Millisecond)
			}
			rec, err := mem.Get(context.Background(), runtime.Identity{Operation: op, Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("record: state %s, attempts %d, owner %q, note %q, gave-up events %d", rec.State, rec.Attempts, rec.Owner, rec.Note, obs.count(runtime.EventReconcileGaveUp))
			// The store refused every write, the note too: the record is
			// reported (the event, an ERROR log) and listed by its attempts.
			if rec.State != runtime.StateUnknown || rec.Attempts < 1 || obs.count(runtime.EventReconcileGaveUp) == 0 {
				t.Fatalf("k's last attempt was used and its answer (%v) never written, and no pass acquires it again: UNKNOWN for good, no note (%q), %d EventReconcileGaveUp",
					tc.o, rec.Note, obs.count(runtime.EventReconcileGaveUp))
			}
		})
	}
}

// r26ManyAttempts reports acquired records as on their 40th attempt (a
// record reconciled for a long time; memstore offers no way to age one).
type r26ManyAttempts struct{ runtime.Store }

func (s r26ManyAttempts) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	recs, err := s.Store.AcquirePending(ctx, p)
	for i := range recs {
		recs[i].Attempts = 40
	}
	return recs, err
}

// ReconcileBackoff: "the backoff after an inconclusive query: base ×
// 2^(attempts-1), capped at max, with full jitter". With a max above
// MaxInt64/2 (an "uncapped" backoff: ReconcileBackoff(time.Second,
// math.MaxInt64)), the doubling overflows int64 past attempt ~35, keeps
// doubling a negative duration down to 0, and the backoff collapses to its
// 10 ms floor: a record reconciled for a long time is asked again every
// 10 ms instead of at most every 2^39 s. Schedule: k UNKNOWN, reported at
// its 40th attempt, query cannot tell, five passes: every hold-off is 10 ms.
func TestR26BackoffOverflowCollapsesTo10ms(t *testing.T) {
	mem := memstore.New()
	rt, err := runtime.New(r26ManyAttempts{mem})
	if err != nil {
		t.Fatal(err)
	}
	const op = "r26.backoff"
	r24unknown(t, rt, op, "k")
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		return 0, runtime.OutcomeUnknown, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1000), runtime.ReconcileBackoff(time.Second, time.Duration(math.MaxInt64)))
	if err != nil {
		t.Fatal(err)
	}
	short := 0
	for i := 0; i < 5; i++ {
		st, err := r.RunOnce(context.Background())
		if err != nil || st.StillUnknown != 1 {
			t.Fatalf("pass %d: %+v, %v", i, st, err)
		}
		rec, err := mem.Get(context.Background(), runtime.Identity{Operation: op, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		hold := rec.LeaseExpiresAt.Sub(rec.StoreNow)
		t.Logf("pass %d: hold-off %v", i, hold)
		if hold < time.Second {
			short++
		}
		if hold > time.Second {
			break
		}
		time.Sleep(hold + 5*time.Millisecond)
	}
	if short == 5 {
		t.Fatalf("five hold-offs at attempt 40 with ReconcileBackoff(1s, MaxInt64) were all under 1 s (full jitter over [0, 2^39 s] gives that with probability ~1e-60): the doubling overflowed")
	}
}

// r26SlowScopeValueCtx is a caller's context whose Value, looked up with
// one of the runtime's keys once armed, blocks for delay once (a context
// whose lookups go through a contended lock, say).
type r26SlowScopeValueCtx struct {
	context.Context
	armed *atomic.Bool
	delay time.Duration
}

func (c r26SlowScopeValueCtx) Value(key any) any {
	if fmt.Sprintf("%T", key) == "runtime.ctxKey" && c.armed.CompareAndSwap(true, false) {
		time.Sleep(c.delay)
	}
	return c.Context.Value(key)
}

// README, the lease rule: "A worker holds its lease from the moment it sent
// the write that granted it"; "two owners never overlap"; row 25.37 (c): no
// code of the caller's runs between the lease check and the effect. execute
// checks the lease (confirmLateStart: less than 0.9 of it has gone by, no
// renewal needed) and only then makes the effect's context: effectCtx.init
// calls ScopeFrom(callerCtx), the caller's Value, when the call sets Scope
// (and no observer or logger made the runtime wrap the context first). A
// Value that blocks past the lease starts the effect after the lease ran out
// and another worker took the record over: the first renewal round then
// starts late and allows itself a tenth of a lease to learn it (more if its
// store is slow), while the effect runs beside the new owner's.
// Schedule: lease 150 ms; A claims at 0 and passes the check; the caller's
// Value blocks 300 ms; at 200 ms B takes over and runs the effect (600 ms);
// at ~300 ms A's effect starts with a live context beside B's (A's renewals
// fail: the round stops it ~15 ms later).
func TestR26ScopeValueAfterLeaseCheckStartsEffectPastLease(t *testing.T) {
	t.Run("no-fault", func(t *testing.T) { r26ScopeValueCase(t, false) })
	t.Run("A-renewals-fail", func(t *testing.T) { r26ScopeValueCase(t, true) })
}

func r26ScopeValueCase(t *testing.T, failA bool) {
	mem := memstore.New()
	var on atomic.Bool
	st := &r25OwnerRenewFails{Store: mem, owner: "r26-A", on: &on}
	on.Store(failA)
	rtA, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithOwner("r26-A"))
	if err != nil {
		t.Fatal(err)
	}
	rtB, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithOwner("r26-B"))
	if err != nil {
		t.Fatal(err)
	}
	starved := stall.Start()
	defer starved.Stop()
	t0 := time.Now()
	var bRunning, overlap atomic.Int32
	var aLive atomic.Int32
	effect := func(ctx context.Context, who string) (int, error) {
		if who == "B" {
			bRunning.Store(1)
			defer bRunning.Store(0)
		}
		if ctx.Err() == nil && who == "A" {
			aLive.Store(1)
			if bRunning.Load() == 1 {
				overlap.Store(1)
			}
		}
		t.Logf("%s's effect starts at %v (ctx: %v)", who, time.Since(t0), ctx.Err())
		for i := 0; i < 120; i++ {
			if err := ctx.Err(); err != nil {
				t.Logf("%s's effect stopped at %v: %v", who, time.Since(t0), context.Cause(ctx))
				return 0, err
			}
			if who == "A" && bRunning.Load() == 1 {
				overlap.Store(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return 1, nil
	}
	var armed atomic.Bool
	armed.Store(true)
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		ctx := r26SlowScopeValueCtx{Context: context.Background(), armed: &armed, delay: 300 * time.Millisecond}
		_, err := runtime.Do[string, int](ctx, rtA, runtime.Call[string, int]{Operation: "r26.scope", Key: "k", Request: "k", Scope: "tenant-1",
			Effect: func(ctx context.Context, _ string) (int, error) { return effect(ctx, "A") }})
		t.Logf("A: %v", err)
	}()
	time.Sleep(200 * time.Millisecond)
	_, err = runtime.Do(context.Background(), rtB, runtime.Call[string, int]{Operation: "r26.scope", Key: "k", Request: "k", Scope: "tenant-1",
		Effect: func(ctx context.Context, _ string) (int, error) { return effect(ctx, "B") }})
	t.Logf("B: %v", err)
	<-doneA
	if overlap.Load() != 0 && stalledPast(t, starved, 15*time.Millisecond, "A's effect ran beside B's") {
		return
	}
	if overlap.Load() != 0 {
		t.Fatalf("A's effect ran, with a live context, beside B's: A's lease was checked before the caller's Value blocked (effectCtx.init's ScopeFrom), and the effect started after the lease ran out and B took over")
	}
}

// r26SlowStore delays every call by a pseudo-random 0-4 ms, both ways
// (before the call reaches the store, and before its reply returns).
type r26SlowStore struct {
	runtime.Store
	n atomic.Int64
}

func (s *r26SlowStore) d() {
	time.Sleep(time.Duration(s.n.Add(7919)%5) * time.Millisecond)
}

func (s *r26SlowStore) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	s.d()
	t, err := s.Store.Renew(ctx, p)
	s.d()
	return t, err
}

func (s *r26SlowStore) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	s.d()
	r, err := s.Store.AcquirePending(ctx, p)
	s.d()
	return r, err
}

func (s *r26SlowStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	s.d()
	v, err := s.Store.Transition(ctx, p)
	s.d()
	return v, err
}

// Row 25.37 (a), stressed: two reconcilers, short leases (20-40 ms), a slow
// store, batches of queries that honour their context and take 0-30 ms:
// no record is asked by two at once.
func TestR26TwoReconcilersStressNoOverlap(t *testing.T) {
	mem := memstore.New()
	st := &r26SlowStore{Store: mem}
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	const op = "r26.stress"
	for i := 0; i < 12; i++ {
		r24unknown(t, rt, op, fmt.Sprintf("k%d", i))
	}
	var mu sync.Mutex
	live := map[string]int{}
	var overlaps, asks atomic.Int32
	var n atomic.Int64
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		asks.Add(1)
		mu.Lock()
		live[req]++
		if live[req] > 1 {
			overlaps.Add(1)
		}
		mu.Unlock()
		defer func() { mu.Lock(); live[req]--; mu.Unlock() }()
		select {
		case <-ctx.Done():
			return 0, runtime.OutcomeUnknown, ctx.Err()
		case <-time.After(time.Duration(n.Add(13)%31) * time.Millisecond):
		}
		return 0, runtime.OutcomeUnknown, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, lease := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond} {
		r, err := runtime.NewReconciler(rt, runtime.ReconcileLease(lease), runtime.ReconcileBatch(6), runtime.ReconcileMaxAttempts(1<<20),
			runtime.ReconcileBackoff(time.Millisecond, 5*time.Millisecond), runtime.ReconcileInterval(time.Millisecond), runtime.ReconcileOwner(fmt.Sprintf("r26-rec-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	wg.Wait()
	t.Logf("asks %d, overlaps %d", asks.Load(), overlaps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d asks of one record by two reconcilers at once", overlaps.Load())
	}
}
