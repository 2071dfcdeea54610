package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r27FailRenew refuses every renewal once on is set (a store outage seen
// only by renewals).
type r27FailRenew struct {
	runtime.Store
	on atomic.Bool
}

func (s *r27FailRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.on.Load() {
		return time.Time{}, errors.New("r27: renew: connection refused")
	}
	return s.Store.Renew(ctx, p)
}

// Row 25.37 (c) / 25.38 (a): the effect's context "stands for
// context.WithCancelCause(withAttempt(parent, ...))". A standard context's
// Err, once non-nil, never changes, and neither does its Cause: a parent's
// deadline or cancellation propagates to the child first, and a later
// cancel(cause) of the child does nothing.
//
// Schedule: the caller's context has a deadline (or is cancelled with a
// cause) while the effect runs; the effect only polls ctx.Err() (the lazy
// path: its context is never made), sees the caller's error and goes on
// for a while (as an effect finishing a step does). Then the renewals fail
// and the lease rule stops the effect: the context, not made yet, is made
// detached from the caller (context.WithoutCancel) and cancelled with
// ErrLeaseLost, so Err turns from DeadlineExceeded into Canceled and Cause
// from the caller's into ErrLeaseLost.
func TestR27EffectErrChangesAtLeaseStop(t *testing.T) {
	callerCause := errors.New("r27: the caller's own cause")
	cases := []struct {
		name   string
		parent func() (context.Context, func())
	}{
		{"caller-deadline", func() (context.Context, func()) {
			return context.WithTimeout(context.Background(), 60*time.Millisecond)
		}},
		{"caller-cancel-cause", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			tm := time.AfterFunc(60*time.Millisecond, func() { cancel(callerCause) })
			return ctx, func() { tm.Stop(); cancel(nil) }
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &r27FailRenew{Store: memstore.New()}
			rt, err := runtime.New(st, runtime.WithLease(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var firstErr, firstCause, lastErr, lastCause error
			effect := func(ctx context.Context, req string) (int, error) {
				st.on.Store(true)
				deadline := time.Now().Add(800 * time.Millisecond)
				for time.Now().Before(deadline) {
					if e := ctx.Err(); e != nil {
						if firstErr == nil {
							firstErr, firstCause = e, context.Cause(ctx)
						}
						lastErr, lastCause = e, context.Cause(ctx)
						if !errors.Is(lastCause, firstCause) || lastErr != firstErr {
							break
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
				if lastErr != nil {
					return 0, lastErr
				}
				return 1, nil
			}
			ctx, cancel := tc.parent()
			defer cancel()
			_, err = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "r27.errchange", Key: fmt.Sprint("k", i), Request: "r", Effect: effect})
			t.Logf("Do: %v", err)
			t.Logf("first: Err=%v Cause=%v; last: Err=%v Cause=%v", firstErr, firstCause, lastErr, lastCause)
			if firstErr == nil {
				t.Fatalf("the effect never saw its context end")
			}
			if lastErr != firstErr || lastCause != firstCause {
				t.Fatalf("the effect's context changed its Err from %v to %v and its Cause from %v to %v once it had ended: a context.WithCancelCause of the caller's never does (row 25.37 (c): the lease rule's stop made it detached from the caller's cancellation)", firstErr, lastErr, firstCause, lastCause)
			}
		})
	}
}

// The same contract after the call returns: "cancelled when the call ends",
// as a deferred cancel(nil) of context.WithCancelCause. A standard child
// cancelled at the call's end has Err Canceled and Cause Canceled for ever,
// whatever its parent does later.
//
// Schedule: the effect keeps its context (a goroutine it started, a
// response that holds it), returns at once, and Do returns. The context,
// never made, answers Err with Canceled. Later the caller's context ends
// (its deadline passes, or it is cancelled with a cause); the effect's
// goroutine then waits on Done, which makes the context from the parent,
// already ended: Err turns into DeadlineExceeded, Cause into the parent's.
func TestR27EffectErrChangesAfterCallReturns(t *testing.T) {
	callerCause := errors.New("r27: the caller's own cause")
	cases := []struct {
		name   string
		parent func() (context.Context, func())
		end    func(cancel func())
	}{
		{"caller-deadline", func() (context.Context, func()) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, func(func()) { time.Sleep(200 * time.Millisecond) }},
		{"caller-cancel-cause", func() (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(callerCause) }
		}, func(cancel func()) { cancel() }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			var kept context.Context
			effect := func(ctx context.Context, req string) (int, error) {
				kept = ctx
				return 1, nil
			}
			ctx, cancel := tc.parent()
			defer cancel()
			if _, err := runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "r27.after", Key: fmt.Sprint("k", i), Request: "r", Effect: effect}); err != nil {
				t.Fatal(err)
			}
			// Only Err is asked here (context.Cause would make the
			// context, which the effect's goroutine need not do).
			err1, cause1 := kept.Err(), error(context.Canceled)
			tc.end(cancel)
			<-kept.Done()
			err2, cause2 := kept.Err(), context.Cause(kept)
			t.Logf("after the call: Err=%v Cause=%v; after the caller's context ended: Err=%v Cause=%v", err1, cause1, err2, cause2)
			if err1 != context.Canceled {
				t.Fatalf("the effect's context after the call: Err %v, want context.Canceled", err1)
			}
			if err2 != err1 || cause2 != cause1 {
				t.Fatalf("the effect's context, cancelled when the call ended (Err %v, Cause %v), later says Err %v, Cause %v: a context.WithCancelCause of the caller's, cancelled by the call's end, never changes (row 25.38 (a))", err1, cause1, err2, cause2)
			}
		})
	}
}

// r27OuterLost says an operation's lease was taken over (the store's
// compare-and-set failed: runtime.ErrLeaseLost) on its renewals, once on is
// set.
type r27OuterLost struct {
	runtime.Store
	op string
	on atomic.Bool
}

func (s *r27OuterLost) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.on.Load() && p.ID.Operation == s.op {
		return time.Time{}, fmt.Errorf("%w: r27: taken over", runtime.ErrLeaseLost)
	}
	return s.Store.Renew(ctx, p)
}

// r27Local is a Local over a plain store: no transaction, the SUCCESS
// transition written on its own.
type r27Local struct{ st runtime.Store }

func (l r27Local) Begin(ctx context.Context, rec runtime.Record) error { return nil }
func (l r27Local) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	return l.st.Transition(ctx, p)
}
func (l r27Local) Finish(ctx context.Context, keep bool) error { return nil }

// The runtime tells that the lease rule stopped (or that the store said
// lost) a call's own effect by context.Cause(effect's context) being
// ErrLeaseLost. But the effect's context is a child of the caller's, and
// a caller's context cancelled with an ErrLeaseLost cause is what an
// effect of an outer call hands on when ITS lease is lost: an inner call
// made from an outer effect (an effect that records a local step with
// DoLocal, or calls another idempotent operation) takes the outer call's
// lost lease for its own.
//
// Schedule: the outer call's effect calls the inner one with its context;
// the inner effect waits on ctx.Done() (it honours its context). The
// outer call's renewal, at a third of its lease, is answered ErrLeaseLost
// (taken over), so the outer effect's context is cancelled with cause
// ErrLeaseLost, and the inner effect's with it. The inner call's lease is
// live and its store answers.
//
//   - Do: the inner record is written UNKNOWN (right), but the call emits
//     EventLeaseLost and logs "another worker took over; this attempt's
//     outcome was not recorded" for the inner operation: the event and the
//     record disagree (no one took the inner record over).
//   - DoLocal: "any other error, a timeout included, releases the claim
//     (nothing happened)"; "a call whose lease was taken over returns
//     ErrLeaseLost". The inner call returns ErrLeaseLost ("another worker
//     took over (version N)"), and its claim is neither released nor
//     recorded: it stays PROCESSING, held, and a retry gets ErrInProgress
//     until the lease runs out.
func TestR27InnerCallTakesOuterLeaseLossForItsOwn(t *testing.T) {
	for _, mode := range []string{"Do", "DoLocal", "Do-success"} {
		local, finishes := mode == "DoLocal", mode == "Do-success"
		t.Run(mode, func(t *testing.T) {
			mem := memstore.New()
			st := &r27OuterLost{Store: mem, op: "r27.outer"}
			var innerLeaseLost atomic.Int32
			obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
				if e.Kind == runtime.EventLeaseLost && e.Operation == "r27.inner" {
					innerLeaseLost.Add(1)
				}
			})
			rt, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithObserver(obs), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			inner := runtime.Call[string, int]{Operation: "r27.inner", Key: "k", Request: "r",
				Effect: func(ctx context.Context, req string) (int, error) {
					st.on.Store(true)
					select {
					case <-ctx.Done():
						if finishes { // its last step was done: it succeeded
							return 1, nil
						}
						return 0, ctx.Err()
					case <-time.After(2 * time.Second):
						return 1, nil
					}
				}}
			// The inner call's lease is long: only the outer's is lost.
			inner.Lease = 10 * time.Second
			var innerErr error
			outer := runtime.Call[string, int]{Operation: "r27.outer", Key: "k", Request: "r",
				Effect: func(ctx context.Context, req string) (int, error) {
					if local {
						_, innerErr = runtime.DoLocal(ctx, rt, inner, r27Local{st: mem})
					} else {
						_, innerErr = runtime.Do(ctx, rt, inner)
					}
					return 0, innerErr
				}}
			_, err = runtime.Do(context.Background(), rt, outer)
			t.Logf("outer: %v", err)
			t.Logf("inner: %v", innerErr)
			rec, gerr := mem.Get(context.Background(), runtime.Identity{Operation: "r27.inner", Key: "k"})
			t.Logf("inner record: state=%q owner=%q err=%v; EventLeaseLost for the inner operation: %d", rec.State, rec.Owner, gerr, innerLeaseLost.Load())
			if local {
				if gerr == nil && rec.State == runtime.StateProcessing {
					_, rerr := runtime.DoLocal(context.Background(), rt, inner, r27Local{st: mem})
					t.Fatalf("DoLocal's inner call, whose own lease was live, returned %v and left its claim PROCESSING (a retry: %v): the outer call's lost lease (its context's cause) was taken for the inner call's own; the claim should have been released (DoLocal doc: any other error releases the claim)", innerErr, rerr)
				}
				return
			}
			if finishes {
				if innerLeaseLost.Load() != 0 && gerr == nil && rec.State == runtime.StateSuccess {
					t.Fatalf("the inner call recorded SUCCESS and returned (%v), yet emitted EventLeaseLost (\"this attempt's outcome was not recorded\") instead of EventSucceeded: the outer call's lost lease was taken for its own", innerErr)
				}
				return
			}
			if innerLeaseLost.Load() != 0 && gerr == nil && rec.State == runtime.StateUnknown {
				t.Fatalf("the inner call's record was written %s by this worker, yet it emitted EventLeaseLost (\"another worker took over; this attempt's outcome was not recorded\") for it: the outer call's lost lease (its context's cause) was taken for its own", rec.State)
			}
		})
	}
}

// r27Outage lets the store go down (every Renew and Transition refused)
// from the moment the reconciler's first answer is written.
type r27Outage struct {
	runtime.Store
	owner string
	down  atomic.Bool
}

func (s *r27Outage) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errors.New("r27: renew: connection refused")
	}
	return s.Store.Renew(ctx, p)
}

func (s *r27Outage) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.down.Load() {
		return 0, errors.New("r27: transition: connection refused")
	}
	v, err := s.Store.Transition(ctx, p)
	if err == nil && p.Owner == s.owner {
		s.down.Store(true)
	}
	return v, err
}

// Row 25.38 (d) / README Reconciliation: "a last attempt whose answer the
// store would not take before the completion timeout (an outage) is
// reported (EventReconcileGaveUp, an ERROR log) but carries no note"; after
// ReconcileMaxAttempts a record "stays UNKNOWN and is reported, never
// dropped". 25.38 (d) fixed this for an answer written by ask; a record left
// by leaveRecord (a late record whose renewal failed, row 25.37 (b)) whose
// write the store refuses is still neither noted nor reported.
//
// Schedule: two UNKNOWN records, ReconcileMaxAttempts(1) (the acquisition is
// each one's last attempt), a 300 ms reconcile lease, one batch. The first
// record's query takes 120 ms, so the second's turn leaves less than half
// of its budget and its lease is renewed first. The store goes down as the
// first answer is written: the renewal fails (a store error), the record is
// left as "cannot tell" by leaveRecord, whose write fails through the
// completion timeout (300 ms). gaveUp is false: no EventReconcileGaveUp,
// the pass counts it StillUnknown, and it stays UNKNOWN on its last attempt
// with no note.
func TestR27LeftRecordWriteOutageDropsLastAttempt(t *testing.T) {
	mem := memstore.New()
	st := &r27Outage{Store: mem, owner: "r27-rec"}
	var gaveUp atomic.Int32
	obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})
	rt, err := runtime.New(st, runtime.WithObserver(obs), runtime.WithCompletionTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		_, err := runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: "r27.rec", Key: k, Request: k,
			Effect: func(ctx context.Context, req string) (int, error) { return 0, errors.New("r27: gateway said nothing") }})
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatalf("setup: %v", err)
		}
	}
	var asked atomic.Int32
	if err := runtime.Register(rt, "r27.rec", func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if asked.Add(1) == 1 {
			time.Sleep(120 * time.Millisecond)
		}
		return 0, runtime.OutcomeUnknown, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(300*time.Millisecond),
		runtime.ReconcileBatch(2), runtime.ReconcileOwner("r27-rec"))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := r.RunOnce(context.Background())
	t.Logf("pass: %+v, err %v; queries asked %d; EventReconcileGaveUp %d", stats, err, asked.Load(), gaveUp.Load())
	st.down.Store(false)
	noted := 0
	for _, k := range []string{"a", "b"} {
		rec, gerr := mem.Get(context.Background(), runtime.Identity{Operation: "r27.rec", Key: k})
		t.Logf("%s: state %s attempts %d note %q (%v)", k, rec.State, rec.Attempts, rec.Note, gerr)
		if rec.Note != "" {
			noted++
		}
	}
	if stats.Acquired != 2 {
		t.Skipf("schedule missed: acquired %d", stats.Acquired)
	}
	if int(gaveUp.Load()) < 2 || stats.GaveUp < 2 {
		t.Fatalf("two records on their last attempt, %d noted as given up, %d EventReconcileGaveUp, pass GaveUp %d: the record left by leaveRecord (its late renewal failed) whose write the store refused was neither noted nor reported (row 25.38 (d) covers only ask's write)", noted, gaveUp.Load(), stats.GaveUp)
	}
}

// F3's inline-query form: a duplicate that finds the record UNKNOWN
// acquires it and asks its Query inline (reconcileInline). The runtime
// reads context.Cause(query's context) wrapping ErrLeaseLost as "another
// worker took over while the query ran" and returns without writing: the
// record, acquired with this call's lease, stays held by this worker.
//
// Schedule: the inner record is UNKNOWN. The outer call's effect calls
// the inner call (with its Query) with its context; the query waits on
// ctx.Done(). The outer call's renewal is answered ErrLeaseLost: the outer
// effect's context, and the query's, are cancelled with cause
// ErrLeaseLost. The inner record's lease (10 s) is live and nobody took it.
func TestR27InlineQueryTakesOuterLeaseLossForItsOwn(t *testing.T) {
	mem := memstore.New()
	st := &r27OuterLost{Store: mem, op: "r27.outer"}
	var innerLeaseLost atomic.Int32
	obs := runtime.ObserverFunc(func(ctx context.Context, e runtime.Event) {
		if e.Kind == runtime.EventLeaseLost && e.Operation == "r27.inner" {
			innerLeaseLost.Add(1)
		}
	})
	rt, err := runtime.New(st, runtime.WithLease(150*time.Millisecond), runtime.WithObserver(obs), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	inner := runtime.Call[string, int]{Operation: "r27.inner", Key: "q", Request: "r", Lease: 10 * time.Second,
		Effect: func(ctx context.Context, req string) (int, error) { return 0, errors.New("r27: gateway said nothing") }}
	if _, err := runtime.Do(context.Background(), rt, inner); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("setup: %v", err)
	}
	inner.Effect = func(ctx context.Context, req string) (int, error) { return 1, nil }
	inner.Query = func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		st.on.Store(true)
		select {
		case <-ctx.Done():
			return 0, runtime.OutcomeUnknown, ctx.Err()
		case <-time.After(2 * time.Second):
			return 0, runtime.OutcomeUnknown, nil
		}
	}
	var innerErr error
	outer := runtime.Call[string, int]{Operation: "r27.outer", Key: "q", Request: "r",
		Effect: func(ctx context.Context, req string) (int, error) {
			_, innerErr = runtime.Do(ctx, rt, inner)
			return 0, innerErr
		}}
	_, err = runtime.Do(context.Background(), rt, outer)
	t.Logf("outer: %v", err)
	t.Logf("inner: %v", innerErr)
	rec, gerr := mem.Get(context.Background(), runtime.Identity{Operation: "r27.inner", Key: "q"})
	t.Logf("inner record: state=%q owner=%q version=%d err=%v; EventLeaseLost for it: %d", rec.State, rec.Owner, rec.Version, gerr, innerLeaseLost.Load())
	if rec.Owner != "" {
		_, derr := runtime.Do(context.Background(), rt, inner)
		t.Fatalf("the inner call's inline query was cancelled by the OUTER call's lost lease; the inner call returned %v and left its record %s held by this worker for its whole lease (a duplicate: %v), though no one took it over", innerErr, rec.State, derr)
	}
}

// ReconcileBackoff's doc: "the backoff after an inconclusive query: base ×
// 2^(attempts-1), capped at max, with full jitter". At the small extreme
// (max under 10 ms) the hold-off is not capped at max: backoff() floors
// every hold-off at 10 ms, which neither the option's doc nor the README
// says, so a record is held off ten times longer than the cap.
//
// Schedule: one UNKNOWN record, ReconcileBackoff(1ms, 1ms), a query that
// cannot tell; after the pass the record's hold-off (its lease, by the
// store's clock) is read.
func TestR27BackoffFloorAtSmallMax(t *testing.T) {
	mem := memstore.New()
	rt, err := runtime.New(mem)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: "r27.bo", Key: "k", Request: "k",
		Effect: func(ctx context.Context, req string) (int, error) { return 0, errors.New("r27: gateway said nothing") }})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("setup: %v", err)
	}
	if err := runtime.Register(rt, "r27.bo", func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		return 0, runtime.OutcomeUnknown, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	st, err := r.RunOnce(context.Background())
	after := time.Now()
	rec, gerr := mem.Get(context.Background(), runtime.Identity{Operation: "r27.bo", Key: "k"})
	if err != nil || gerr != nil {
		t.Fatalf("pass %+v: %v; get: %v", st, err, gerr)
	}
	hold := rec.LeaseExpiresAt.Sub(before)
	t.Logf("pass %+v in %v; hold-off until %v after the pass started", st, after.Sub(before), hold)
	// As documented since: capped at max, and never under 10 ms.
	if rec.LeaseExpiresAt.Before(before.Add(10*time.Millisecond)) || rec.LeaseExpiresAt.After(after.Add(12*time.Millisecond)) {
		t.Fatalf("ReconcileBackoff(1ms, 1ms): the record is held off until %v after the pass began (the pass took %v); want 10 ms after its write", hold, after.Sub(before))
	}
}
