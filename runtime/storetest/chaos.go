package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// fencedLedger is a downstream that deduplicates by the downstream key and
// fences by token, as a careful payment gateway would: a charge or a query
// with token t makes every later request with a token below t stale.
type fencedLedger struct {
	mu      sync.Mutex
	charges map[string]receipt
	fence   map[string]int64
	n       int
	stale   int
	// rerun counts effects that started although the downstream had
	// already charged: the runtime should have asked the query instead.
	rerun int
}

// started notes an effect starting.
func (l *fencedLedger) started(ctx context.Context) {
	a, _ := runtime.AttemptFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.charges[a.DownstreamKey]; ok {
		l.rerun++
	}
}

var errStale = errors.New("ledger: stale fencing token")

func (l *fencedLedger) admit(ctx context.Context) (string, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return "", errors.New("ledger: no attempt in context")
	}
	if a.FencingToken < l.fence[a.DownstreamKey] {
		l.stale++
		return "", errStale
	}
	l.fence[a.DownstreamKey] = a.FencingToken
	return a.DownstreamKey, nil
}

func (l *fencedLedger) charge(ctx context.Context, r chargeReq) (receipt, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dk, err := l.admit(ctx)
	if err != nil {
		return receipt{}, runtime.Permanent(err)
	}
	if rc, ok := l.charges[dk]; ok {
		return rc, nil // the downstream's own idempotency
	}
	l.n++
	rc := receipt{ID: fmt.Sprintf("ch_%d", l.n), Amount: r.Amount}
	l.charges[dk] = rc
	return rc, nil
}

func (l *fencedLedger) find(ctx context.Context, _ chargeReq) (receipt, runtime.Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dk, err := l.admit(ctx)
	if err != nil {
		return receipt{}, runtime.OutcomeUnknown, err
	}
	if rc, ok := l.charges[dk]; ok {
		return rc, runtime.OutcomeSucceeded, nil
	}
	return receipt{}, runtime.OutcomeNotHappened, nil
}

// testChaos runs clients that retry against workers that time out, fail,
// freeze past their lease and come back, with a reconciler running, and
// checks that every key converges to what happened downstream: every success
// a client saw for a key is the downstream's one charge, and no record is
// left PROCESSING or UNKNOWN.
func testChaos(t *testing.T, s runtime.Store) {
	scope := uniqueScope(t)
	ctx := runtime.WithScope(context.Background(), scope)
	op := "Chaos.Charge." + scope
	l := &fencedLedger{charges: map[string]receipt{}, fence: map[string]int64{}}
	healthy := newRuntime(t, s, runtime.WithLease(time.Second), runtime.WithMaxWait(300*time.Millisecond))
	frozen := newRuntime(t, dropRenewals{s}, runtime.WithLease(60*time.Millisecond), runtime.WithMaxWait(300*time.Millisecond))
	for _, rt := range []*runtime.Runtime{healthy, frozen} {
		if err := runtime.Register(rt, op, l.find, runtime.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := runtime.NewReconciler(healthy, runtime.ReconcileInterval(20*time.Millisecond), runtime.ReconcileBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopReconciler := context.WithCancel(context.Background())
	reconciled := make(chan struct{})
	go func() { defer close(reconciled); _ = rec.Run(runCtx) }()

	const keys, clients = 12, 8
	duration := 1500 * time.Millisecond
	var mu sync.Mutex
	seen := make(map[string]map[receipt]bool) // key -> successful responses
	var wg sync.WaitGroup
	deadline := time.Now().Add(duration)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				key := fmt.Sprintf("k%d", rng.IntN(keys))
				rt, mode := healthy, rng.IntN(100)
				if mode >= 85 {
					rt = frozen
				}
				got, err := runtime.Do(ctx, rt, runtime.Call[chargeReq, receipt]{
					Operation: op, Key: key, Request: chargeReq{"acct", 100}, Query: l.find,
					Effect: func(ctx context.Context, r chargeReq) (receipt, error) {
						l.started(ctx)
						switch {
						case mode < 50:
							return l.charge(ctx, r)
						case mode < 65: // charged, answer lost
							if _, err := l.charge(ctx, r); err != nil {
								return receipt{}, err
							}
							return receipt{}, fmt.Errorf("gateway: %w", context.DeadlineExceeded)
						case mode < 75:
							return receipt{}, runtime.Retryable(errors.New("gateway: connection refused"))
						case mode < 85: // timed out before the gateway saw it
							return receipt{}, fmt.Errorf("gateway: %w", context.DeadlineExceeded)
						default: // the worker freezes past its lease, then carries on
							time.Sleep(150 * time.Millisecond)
							return l.charge(ctx, r)
						}
					},
				})
				if err == nil {
					mu.Lock()
					if seen[key] == nil {
						seen[key] = map[receipt]bool{}
					}
					seen[key][got] = true
					mu.Unlock()
				}
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // frozen leases expire
	stopReconciler()
	<-reconciled
	// Drain what is left: until a pass acquires nothing while no key is
	// pending. A record the reconciler left UNKNOWN is held off for a
	// moment before it may be acquired again; a pass inside that hold-off
	// acquires nothing, and stopping there left the record UNKNOWN on a
	// loaded machine (bench/ciload.sh, run 2 at f764a30).
	pending := func() bool {
		for k := range keys {
			r, err := s.Get(context.Background(), runtime.Identity{Scope: scope, Operation: op, Key: fmt.Sprintf("k%d", k)})
			if err == nil && !r.State.Final() {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		st, err := rec.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Acquired == 0 && !pending() {
			break
		}
		time.Sleep(60 * time.Millisecond)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		id := runtime.Identity{Scope: scope, Operation: op, Key: key}
		charge, charged := l.charges[runtime.DownstreamKey(id)]
		for got := range seen[key] {
			if !charged || got != charge {
				t.Errorf("%s: a client was answered %+v, but the downstream has %+v (charged %v)", key, got, charge, charged)
			}
		}
		r, err := s.Get(context.Background(), id)
		switch {
		case errors.Is(err, runtime.ErrNotFound):
			if charged {
				t.Errorf("%s: charged downstream but the record is gone", key)
			}
		case err != nil:
			t.Fatal(err)
		case r.State == runtime.StateSuccess:
			var stored receipt
			if err := healthy.Codec().Unmarshal(r.Response, &stored); err != nil || !charged || stored != charge {
				t.Errorf("%s: SUCCESS record holds %+v (%v), downstream has %+v (charged %v)", key, stored, err, charge, charged)
			}
		case r.State == runtime.StateFailed:
			if charged {
				t.Errorf("%s: FAILED recorded, but the downstream charged %+v", key, charge)
			}
		default:
			t.Errorf("%s: left %s after reconciliation: %+v", key, r.State, r)
		}
	}
	if l.rerun > 0 {
		t.Errorf("%d effects started although the downstream had already charged", l.rerun)
	}
	t.Logf("%d keys charged, %d stale requests fenced off", len(l.charges), l.stale)
}
