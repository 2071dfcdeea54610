package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// RunReconcile checks the reconciler and the sweeper on the store.
func RunReconcile(t *testing.T, newStore NewStore) {
	runCases(t, newStore, []testCase{
		{"CrashAfterClaim", func(t *testing.T, s runtime.Store) { testCrash(t, s, crashAfterClaim) }},
		{"CrashAfterEffect", func(t *testing.T, s runtime.Store) { testCrash(t, s, crashAfterEffect) }},
		{"CrashBeforeCompletion", func(t *testing.T, s runtime.Store) { testCrash(t, s, crashBeforeCompletion) }},
		{"TimeoutConvergesToSuccess", testReconcileTimeout},
		{"QueryRunsInTheEffectsScope", testQueryScope},
		{"NotHappenedPolicyFail", testReconcileNotHappenedFail},
		{"BackoffThenGiveUp", testReconcileGiveUp},
		{"ConcurrentReconcilersConvergeOnce", testConcurrentReconcilers},
		{"OnlyRegisteredOperations", testReconcileOnlyRegistered},
		{"RunStopsOnCancel", testReconcilerRun},
		{"SweeperRemovesOnlyExpiredFinished", testSweeper},
		{"ChaosConverges", testChaos},
	})
}

// ledger is a downstream (a payment gateway) that remembers its charges by
// the downstream key idem hands the effect, and answers queries from that.
type ledger struct {
	mu      sync.Mutex
	charges map[string]receipt
	runs    atomic.Int32
	queries atomic.Int32
}

func newLedger() *ledger { return &ledger{charges: make(map[string]receipt)} }

func (l *ledger) charge(ctx context.Context, r chargeReq) (receipt, error) {
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return receipt{}, errors.New("no downstream key in the effect's context")
	}
	n := l.runs.Add(1)
	rc := receipt{ID: fmt.Sprintf("ch_%d", n), Amount: r.Amount}
	l.mu.Lock()
	l.charges[dk] = rc
	l.mu.Unlock()
	return rc, nil
}

func (l *ledger) find(ctx context.Context, r chargeReq) (receipt, runtime.Outcome, error) {
	l.queries.Add(1)
	dk, ok := runtime.DownstreamKeyFrom(ctx)
	if !ok {
		return receipt{}, runtime.OutcomeUnknown, errors.New("no downstream key in the query's context")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rc, ok := l.charges[dk]; ok {
		return rc, runtime.OutcomeSucceeded, nil
	}
	return receipt{}, runtime.OutcomeNotHappened, nil
}

type crashPoint int

const (
	crashAfterClaim crashPoint = iota
	crashAfterEffect
	crashBeforeCompletion
)

// frozen is a store that stops answering the dead worker once it has
// claimed: no renewals, and (crashBeforeCompletion) no completion.
type frozen struct {
	runtime.Store
	dropTransitions bool
}

func (f frozen) Renew(context.Context, runtime.RenewParams) (time.Time, error) {
	return time.Time{}, errors.New("injected: the worker is frozen")
}

func (f frozen) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if f.dropTransitions {
		return 0, errors.New("injected: the worker died before recording the outcome")
	}
	return f.Store.Transition(ctx, p)
}

// reconcilerRuntime is a runtime in another process that never served the
// original calls: it only knows the operation's query by registration.
func reconcilerRuntime(t *testing.T, s runtime.Store, op string, l *ledger, opts runtime.QueryOptions) *runtime.Runtime {
	t.Helper()
	rt := newRuntime(t, s, runtime.WithOwner("reconciler-process-"+uniqueScope(t)[len(uniqueScope(t))-12:]))
	if err := runtime.Register(rt, op, l.find, opts); err != nil {
		t.Fatal(err)
	}
	return rt
}

func newReconciler(t *testing.T, rt *runtime.Runtime, opts ...runtime.ReconcilerOption) *runtime.Reconciler {
	t.Helper()
	r, err := runtime.NewReconciler(rt, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testCrash(t *testing.T, s runtime.Store, at crashPoint) {
	ctx := scoped(t)
	var op string
	l := newLedger()
	dead := newRuntime(t, frozen{Store: s, dropTransitions: at == crashBeforeCompletion},
		runtime.WithLease(shortLease), runtime.WithOwner("dead"), runtime.WithCompletionTimeout(50*time.Millisecond))
	hang := make(chan struct{})
	defer close(hang)
	// The frozen worker renews nothing: when its claim's reply comes later
	// than the lease rule allows (a loaded machine, a batched claim), it
	// refuses to start the effect, rightly, and the crash did not happen
	// where this case needs it. It tries again under another operation
	// (the reconciler below serves the last one only).
	key := ""
	for try := 1; key == ""; try++ {
		k := "k"
		op = fmt.Sprintf("Payments.Charge.%s.%d", uniqueScope(t), try)
		holding, returned := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := runtime.Do(ctx, dead, runtime.Call[chargeReq, receipt]{Operation: op, Key: k, Request: chargeReq{"a", 1},
				Effect: func(ctx context.Context, r chargeReq) (receipt, error) {
					switch at {
					case crashAfterClaim:
						close(holding)
						<-hang
					case crashAfterEffect:
						_, _ = l.charge(ctx, r)
						close(holding)
						<-hang
					case crashBeforeCompletion:
						defer close(holding)
						return l.charge(ctx, r)
					}
					return receipt{}, errors.New("never")
				}})
			returned <- err
		}()
		select {
		case <-holding:
			key = k
		case err := <-returned:
			select {
			case <-holding: // the effect ran, then the call returned
				key = k
				continue
			default:
			}
			if try == 5 {
				t.Fatalf("the frozen worker never reached its effect in %d tries (last: %v)", try, err)
			}
			t.Logf("try %d: the frozen worker did not start its effect: %v", try, err)
		}
	}
	time.Sleep(2 * shortLease) // the lease expires
	id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: op, Key: key}
	var st runtime.ReconcileStats
	deadline := time.Now().Add(10 * time.Second)
	for st.Acquired == 0 && time.Now().Before(deadline) { // crashBeforeCompletion: wait out the completion retries
		var err error
		st, err = newReconciler(t, reconcilerRuntime(t, s, op, l, runtime.QueryOptions{})).RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Acquired == 0 {
			time.Sleep(shortLease)
		}
	}
	rec, err := s.Get(ctx, id)
	switch at {
	case crashAfterClaim:
		if st.Released != 1 || !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("stats %+v, record %+v (%v): want the record released (the effect never happened)", st, rec, err)
		}
	default:
		if st.Succeeded != 1 || err != nil || rec.State != runtime.StateSuccess {
			t.Fatalf("stats %+v, record %+v (%v): want SUCCESS from the query", st, rec, err)
		}
	}
	// The client retries on a healthy worker: the effect never runs twice.
	live := newRuntime(t, s)
	got, err := runtime.Do(ctx, live, runtime.Call[chargeReq, receipt]{Operation: op, Key: key, Request: chargeReq{"a", 1}, Effect: l.charge})
	if err != nil || got.ID != "ch_1" || l.runs.Load() != 1 {
		t.Fatalf("retry after reconciliation: %+v, %v; effect ran %d times, want once", got, err, l.runs.Load())
	}
}

func testReconcileTimeout(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Payments.Charge." + uniqueScope(t)
	l := newLedger()
	rt := newRuntime(t, s)
	_, err := runtime.Do(ctx, rt, runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 7},
		Effect: func(ctx context.Context, r chargeReq) (receipt, error) {
			if _, err := l.charge(ctx, r); err != nil {
				return receipt{}, err
			}
			return timesOut(ctx, r) // charged, but the answer is lost
		}})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v", err)
	}
	st, err := newReconciler(t, reconcilerRuntime(t, s, op, l, runtime.QueryOptions{})).RunOnce(context.Background())
	if err != nil || st.Succeeded != 1 {
		t.Fatalf("reconcile: %+v, %v", st, err)
	}
	got, err := runtime.Do(ctx, rt, runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 7}, Effect: l.charge})
	if err != nil || got != (receipt{ID: "ch_1", Amount: 7}) || l.runs.Load() != 1 {
		t.Fatalf("replay after reconcile: %+v, %v (runs %d)", got, err, l.runs.Load())
	}
}

func testReconcileNotHappenedFail(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Payments.Charge." + uniqueScope(t)
	l := newLedger()
	if _, err := runtime.Do(ctx, newRuntime(t, s), runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 1}, Effect: timesOut}); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	rrt := reconcilerRuntime(t, s, op, l, runtime.QueryOptions{NotHappened: runtime.NotHappenedFail})
	st, err := newReconciler(t, rrt).RunOnce(context.Background())
	if err != nil || st.Failed != 1 {
		t.Fatalf("reconcile: %+v, %v", st, err)
	}
	_, err = runtime.Do(ctx, newRuntime(t, s), runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 1}, Effect: l.charge})
	var fe *runtime.FailedError
	if !errors.As(err, &fe) || l.runs.Load() != 0 {
		t.Fatalf("retry after NotHappenedFail: %v (runs %d), want the FAILED replay", err, l.runs.Load())
	}
}

func testReconcileGiveUp(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Payments.Charge." + uniqueScope(t)
	if _, err := runtime.Do(ctx, newRuntime(t, s), runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 1}, Effect: timesOut}); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	var gaveUp atomic.Int32
	rt := newRuntime(t, s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	var queries atomic.Int32
	if err := runtime.Register(rt, op, func(context.Context, chargeReq) (receipt, runtime.Outcome, error) {
		queries.Add(1)
		return receipt{}, runtime.OutcomeUnknown, errors.New("gateway: status endpoint unavailable")
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r := newReconciler(t, rt, runtime.ReconcileMaxAttempts(3), runtime.ReconcileBackoff(20*time.Millisecond, 40*time.Millisecond))
	var total runtime.ReconcileStats
	deadline := time.Now().Add(10 * time.Second)
	for gaveUp.Load() == 0 && time.Now().Before(deadline) {
		st, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		total.StillUnknown += st.StillUnknown
		total.GaveUp += st.GaveUp
		time.Sleep(50 * time.Millisecond)
	}
	if queries.Load() != 3 || total.StillUnknown != 2 || total.GaveUp != 1 || gaveUp.Load() != 1 {
		t.Fatalf("queries %d, stats %+v, gave-up events %d; want 3 queries, 2 backoffs, then give up once", queries.Load(), total, gaveUp.Load())
	}
	// The note is what `idemctl list -gave-up` finds: written with the
	// third attempt's outcome, not one attempt later.
	id, err := runtime.NewIdentity(ctx, op, "k")
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || !strings.Contains(rec.Note, "gave up after 3 attempts") {
		t.Fatalf("the given-up record: note %q, %v; want \"reconcile gave up after 3 attempts: …\"", rec.Note, err)
	}
	time.Sleep(100 * time.Millisecond)
	if st, _ := r.RunOnce(context.Background()); st.Acquired != 0 {
		t.Fatalf("a given-up record was acquired again: %+v", st)
	}
	rec, err := s.Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: op, Key: "k"})
	if err != nil || rec.State != runtime.StateUnknown || rec.Attempts != 3 {
		t.Fatalf("given-up record: %+v, %v; want it kept UNKNOWN", rec, err)
	}
}

// reconcileRecords is how many UNKNOWN records the concurrent test makes.
var reconcileRecords = 1000

func testConcurrentReconcilers(t *testing.T, s runtime.Store) {
	scope := uniqueScope(t)
	op := "Payments.Charge." + scope
	ctx := context.Background()
	n := reconcileRecords
	if testing.Short() {
		n = 100
	}
	// Make n UNKNOWN records, as a crashed fleet would leave them.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			id := runtime.Identity{Scope: scope, Operation: op, Key: fmt.Sprintf("k%d", i)}
			req := []byte(fmt.Sprintf(`{"account":"a","amount":%d}`, i))
			res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: runtime.Fingerprint(req), Request: req, Owner: "dead", Lease: longLease})
			if err == nil {
				_, err = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "dead", Version: res.Record.Version, To: runtime.StateUnknown})
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := make(map[int]int)
	query := func(ctx context.Context, r chargeReq) (receipt, runtime.Outcome, error) {
		mu.Lock()
		seen[r.Amount]++
		mu.Unlock()
		return receipt{ID: fmt.Sprintf("ch_%d", r.Amount), Amount: r.Amount}, runtime.OutcomeSucceeded, nil
	}
	var stats [2]runtime.ReconcileStats
	var rwg sync.WaitGroup
	for i := range 2 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rt := newRuntime(t, s, runtime.WithOwner(fmt.Sprintf("reconciler-%d", i)))
			if err := runtime.Register(rt, op, query, runtime.QueryOptions{}); err != nil {
				t.Error(err)
				return
			}
			st, err := newReconciler(t, rt, runtime.ReconcileBatch(25)).RunOnce(ctx)
			if err != nil {
				t.Error(err)
			}
			stats[i] = st
		}()
	}
	rwg.Wait()
	if got := stats[0].Succeeded + stats[1].Succeeded; got != n {
		t.Errorf("converged %d records (%+v, %+v), want %d", got, stats[0], stats[1], n)
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("record %d was queried %d times, want exactly once", i, seen[i])
		}
	}
	for i := range n {
		rec, err := s.Get(ctx, runtime.Identity{Scope: scope, Operation: op, Key: fmt.Sprintf("k%d", i)})
		if err != nil || rec.State != runtime.StateSuccess {
			t.Fatalf("record %d: %+v, %v", i, rec, err)
		}
	}
	t.Logf("reconciler 0: %+v; reconciler 1: %+v", stats[0], stats[1])
}

func testReconcileOnlyRegistered(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Payments.Charge." + uniqueScope(t)
	other := "Payments.Other." + uniqueScope(t)
	rt := newRuntime(t, s)
	for _, o := range []string{op, other} {
		if _, err := runtime.Do(ctx, rt, runtime.Call[chargeReq, receipt]{Operation: o, Key: "k", Request: chargeReq{"a", 1}, Effect: timesOut}); !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatal(err)
		}
	}
	l := newLedger()
	if _, err := newReconciler(t, reconcilerRuntime(t, s, op, l, runtime.QueryOptions{})).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: other, Key: "k"})
	if err != nil || rec.State != runtime.StateUnknown || rec.Attempts != 0 {
		t.Fatalf("record of an unregistered operation: %+v, %v; want it untouched", rec, err)
	}
	// No registered operation at all: nothing to do.
	st, err := newReconciler(t, newRuntime(t, s)).RunOnce(context.Background())
	if err != nil || st.Acquired != 0 {
		t.Fatalf("reconciler without operations: %+v, %v", st, err)
	}
}

func testReconcilerRun(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Payments.Charge." + uniqueScope(t)
	l := newLedger()
	var reconciled atomic.Int32
	rt := newRuntime(t, s, runtime.WithOwner("run-test-"+uniqueScope(t)[len(uniqueScope(t))-12:]), runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconciled {
			reconciled.Add(1)
		}
	})))
	if err := runtime.Register(rt, op, l.find, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newReconciler(t, rt, runtime.ReconcileInterval(20*time.Millisecond)).Run(runCtx) }()
	// An outcome turns UNKNOWN while the reconciler runs; it converges it.
	if _, err := runtime.Do(ctx, newRuntime(t, s), runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"a", 1},
		Effect: func(ctx context.Context, r chargeReq) (receipt, error) {
			if _, err := l.charge(ctx, r); err != nil {
				return receipt{}, err
			}
			return timesOut(ctx, r)
		}}); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for reconciled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if reconciled.Load() != 1 {
		t.Fatalf("reconciled %d records, want 1", reconciled.Load())
	}
}

func testSweeper(t *testing.T, s runtime.Store) {
	ctx := scoped(t)
	op := "Sweep.Op." + uniqueScope(t)
	short := newRuntime(t, s, runtime.WithTTL(shortTTL))
	long := newRuntime(t, s, runtime.WithTTL(time.Hour))
	l := newLedger()
	do := func(rt *runtime.Runtime, key string, effect func(context.Context, chargeReq) (receipt, error)) {
		_, _ = runtime.Do(ctx, rt, runtime.Call[chargeReq, receipt]{Operation: op, Key: key, Request: chargeReq{"a", 1}, Effect: effect})
	}
	do(short, "expired-success", l.charge)
	do(short, "expired-failed", func(context.Context, chargeReq) (receipt, error) {
		return receipt{}, runtime.Permanent(errors.New("declined"))
	})
	do(long, "live-success", l.charge)
	do(short, "unknown", timesOut)
	holding, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go do(short, "processing", func(context.Context, chargeReq) (receipt, error) {
		close(holding)
		<-release
		return receipt{}, nil
	})
	<-holding
	time.Sleep(shortTTL + 100*time.Millisecond)

	sw, err := runtime.NewSweeper(short, runtime.SweepBatch(3))
	if err != nil {
		t.Fatal(err)
	}
	n, err := sw.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := func(key string) runtime.Identity {
		return runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: op, Key: key}
	}
	for _, key := range []string{"expired-success", "expired-failed"} {
		if _, err := s.Get(ctx, id(key)); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("%s survived the sweep (swept %d): %v", key, n, err)
		}
	}
	for _, key := range []string{"live-success", "unknown", "processing"} {
		if _, err := s.Get(ctx, id(key)); err != nil {
			t.Errorf("%s was swept: %v", key, err)
		}
	}
}
