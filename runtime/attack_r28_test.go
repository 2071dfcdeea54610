package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r28FailRenew refuses every renewal once on is set (a store outage seen
// only by renewals).
type r28FailRenew struct {
	runtime.Store
	on atomic.Bool
}

func (s *r28FailRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.on.Load() {
		return time.Time{}, errors.New("r28: renew: connection refused")
	}
	return s.Store.Renew(ctx, p)
}

// Row 25.39 (a) says the effect's context's "error and cause, once seen,
// never change", and lazyctx.go that the context "behaves exactly as"
// context.WithCancelCause(withAttempt(parent, ...)).
//
// Schedule: the caller's context ends (a deadline, or a cancellation with a
// cause) while the effect runs. The effect asks context.Cause(ctx) (nil
// while the context lives, the usual "am I stopped, and why" check) and
// never ctx.Err(): context.Cause asks ctx.Value(&cancelCtxKey), which the
// lazy context, not made yet, passes to the caller's context, so the effect
// sees the caller's cause without the context being made. Then the
// renewals fail and the lease rule's stop makes the context detached from
// the caller's and cancels it with ErrLeaseLost: Cause turns from the
// caller's into ErrLeaseLost. A standard child of the caller's context was
// cancelled with the caller's cause when the caller's ended, and the later
// cancel(ErrLeaseLost) does nothing.
func TestR28EffectCauseChangesAtLeaseStop(t *testing.T) {
	callerCause := errors.New("r28: the caller's own cause")
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
			st := &r28FailRenew{Store: memstore.New()}
			rt, err := runtime.New(st, runtime.WithLease(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var firstCause, lastCause error
			effect := func(ctx context.Context, req string) (int, error) {
				st.on.Store(true)
				deadline := time.Now().Add(800 * time.Millisecond)
				for time.Now().Before(deadline) {
					if c := context.Cause(ctx); c != nil {
						if firstCause == nil {
							firstCause = c
						}
						lastCause = c
						if lastCause != firstCause {
							break
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
				if lastCause != nil {
					return 0, lastCause
				}
				return 1, nil
			}
			ctx, cancel := tc.parent()
			defer cancel()
			_, err = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "r28.causechange", Key: fmt.Sprint("k", i), Request: "r", Effect: effect})
			t.Logf("Do: %v", err)
			t.Logf("first Cause=%v; last Cause=%v", firstCause, lastCause)
			if firstCause == nil {
				t.Fatalf("the effect never saw its context end")
			}
			if lastCause != firstCause {
				t.Fatalf("the effect's context changed its Cause from %v to %v once it had ended: a context.WithCancelCause of the caller's never does (the cause was read through Value, which the lazy context passes to the caller's before it is made; the lease rule's stop then made it detached)", firstCause, lastCause)
			}
		})
	}
}

// The same contract at the call's end. Schedule: the caller's context is
// cancelled with a cause (or its deadline passes) while the effect runs;
// the effect sees it through context.Cause (the caller's cause, passed
// through Value: the context is not made), keeps ctx (a goroutine it
// started) and returns. After the call, the context, first made then, is
// made "ended with the call": Err Canceled, Cause Canceled. A standard
// child had been cancelled by its parent first: Err the parent's, Cause the
// parent's cause, for ever.
func TestR28EffectCauseChangesAfterCallReturns(t *testing.T) {
	callerCause := errors.New("r28: the caller's own cause")
	cases := []struct {
		name string
		// parent returns the caller's context (a deadline of d, where it
		// has one) and a function that ends it and waits until it has
		// ended.
		parent func(d time.Duration) (context.Context, func(), func())
	}{
		{"caller-deadline", func(d time.Duration) (context.Context, func(), func()) {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			return ctx, func() { <-ctx.Done() }, cancel
		}},
		{"caller-cancel-cause", func(time.Duration) (context.Context, func(), func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(callerCause) }, func() { cancel(nil) }
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			var kept context.Context
			var during error
			// A deadline that ends before the effect starts (a loaded
			// machine: 30 ms passed in the claim, series at 50a3546, run
			// 3) proves nothing: the call is made again, under a new key,
			// with a longer one.
			for try, d := 0, 30*time.Millisecond; ; try, d = try+1, d*3 {
				ctx, end, cancel := tc.parent(d)
				effect := func(ctx context.Context, req string) (int, error) {
					kept = ctx
					end()
					during = context.Cause(ctx)
					return 1, nil
				}
				_, err = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "r28.after", Key: fmt.Sprint("k", i, "-", try), Request: "r", Effect: effect})
				cancel()
				t.Logf("Do: %v", err)
				if kept != nil {
					break
				}
				if try == 4 || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("the effect did not run: %v", err)
				}
			}
			after := context.Cause(kept)
			t.Logf("during the effect: Cause=%v; after the call: Err=%v Cause=%v", during, kept.Err(), after)
			if during == nil {
				t.Fatalf("the effect did not see the caller's context end")
			}
			if after != during {
				t.Fatalf("the effect's context said Cause %v during the effect and %v after the call: a context.WithCancelCause of the caller's, cancelled by the caller first, keeps the caller's cause", during, after)
			}
		})
	}
}

// README (reconciler): "Inline queries by duplicates do not count as
// attempts, so the reconciler always gets its ReconcileMaxAttempts; a
// record it gives up on carries a note and is listed by idemctl list
// -gave-up N" (the two records that go without a note are named there, and
// this is neither).
//
// Schedule: a call's effect times out (UNKNOWN). The reconciler asks the
// query on the record's last attempt; it cannot tell: the record is given
// up on, with the note "reconcile gave up after 1 attempts: ...". Its
// hold-off passes. A duplicate of the call (with the Query) acquires the
// UNKNOWN record and asks the query inline; it still cannot tell, and the
// call writes UNKNOWN with no note: the give-up note is gone, and no
// reconciler acquires the record again (its attempts are used), so nothing
// ever writes it back. The record a reconciler gave up on carries no note.
func TestR28InlineQueryErasesGaveUpNote(t *testing.T) {
	for _, sx := range teststores.All() {
		t.Run(sx.Name, func(t *testing.T) { r28InlineQueryErasesGaveUpNote(t, sx.New(t)) })
	}
}

func r28InlineQueryErasesGaveUpNote(t *testing.T, st runtime.Store) {
	key := teststores.Unique()
	rt, err := runtime.New(st, runtime.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r28.gaveup"
	cannotTell := func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		return 0, runtime.OutcomeUnknown, errors.New("r28: downstream: 503")
	}
	if err := runtime.Register(rt, op, cannotTell, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	call := runtime.Call[string, int]{Operation: op, Key: key, Request: "r", Query: cannotTell,
		Effect: func(ctx context.Context, req string) (int, error) { return 0, context.DeadlineExceeded }}
	ctx := context.Background()
	if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
	}
	rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileBackoff(10*time.Millisecond, 10*time.Millisecond), runtime.ReconcileLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := rec.RunOnce(ctx)
	if err != nil || stats.GaveUp != 1 {
		t.Fatalf("reconcile: %+v, %v; want one record given up on", stats, err)
	}
	id := runtime.Identity{Operation: op, Key: key}
	before, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("given up on: state %s attempts %d note %q", before.State, before.Attempts, before.Note)
	if before.Note == "" {
		t.Fatalf("the record given up on has no note to begin with")
	}
	time.Sleep(50 * time.Millisecond) // the hold-off (at most 10 ms) passes
	_, err = runtime.Do(ctx, rt, call)
	t.Logf("duplicate: %v", err)
	after, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the duplicate's inline query: state %s attempts %d note %q", after.State, after.Attempts, after.Note)
	// No reconciler takes it again: its attempts are used.
	if stats, err := rec.RunOnce(ctx); err != nil || stats.Acquired != 0 {
		t.Logf("a second pass: %+v, %v", stats, err)
	}
	if after.State == runtime.StateUnknown && after.Attempts >= 1 && after.Note == "" {
		t.Fatalf("the record the reconciler gave up on (note %q) lost its note to a duplicate's inline query that could not tell either; it stays UNKNOWN, attempts %d, and no reconciler writes it again", before.Note, after.Attempts)
	}
}

// Row 25.39 (a): "An ended parent now makes the context at once, on the
// effect's goroutine". Schedule: the caller's deadline passes while the
// effect runs; the effect does not look at its context (it is finishing a
// step) and returns success, keeping ctx for a goroutine. A standard
// context.WithCancelCause of the caller's had ended with the caller's
// deadline before the call's end: Err DeadlineExceeded for ever. The lazy
// context, never made, is made after the call "ended with it": Err
// Canceled, as if the call's end, not the deadline, had stopped it.
func TestR28EffectErrAfterCallHidesCallerDeadline(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var kept context.Context
	effect := func(ectx context.Context, req string) (int, error) {
		kept = ectx
		<-ctx.Done() // the caller's deadline passes during the effect
		return 1, nil
	}
	_, err = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "r28.deadline", Key: "k", Request: "r", Effect: effect})
	t.Logf("Do: %v; caller: %v; effect's context after the call: Err=%v Cause=%v", err, ctx.Err(), kept.Err(), context.Cause(kept))
	if kept.Err() != context.DeadlineExceeded {
		t.Fatalf("the effect's context says %v after the call, though the caller's deadline had ended it during the call (a context.WithCancelCause of the caller's says context.DeadlineExceeded)", kept.Err())
	}
}

// README (reconciler): "Inline queries by duplicates do not count as
// attempts, so the reconciler always gets its ReconcileMaxAttempts"; "after
// ReconcileMaxAttempts it stays UNKNOWN and is reported
// (EventReconcileGaveUp, an ERROR log), never dropped".
//
// Schedule: the effect times out (UNKNOWN, run 1). The reconciler
// (MaxAttempts 1) asks; the query cannot tell: given up on, reported. The
// hold-off passes. A duplicate's inline query now learns that run 1 did
// not happen, so the duplicate runs the effect again (run 2), which times
// out too: UNKNOWN again. The record kept the attempts of run 1's
// reconciliation (the inline query's takeover and the new claim keep
// them), so no reconciler ever acquires it again: run 2's outcome is never
// asked about (0 attempts, not ReconcileMaxAttempts), never given up on
// with a note, never reported.
func TestR28ReexecutedEffectGetsNoReconcileAttempts(t *testing.T) {
	for _, sx := range teststores.All() {
		t.Run(sx.Name, func(t *testing.T) { r28ReexecutedEffectGetsNoReconcileAttempts(t, sx.New(t)) })
	}
}

func r28ReexecutedEffectGetsNoReconcileAttempts(t *testing.T, st runtime.Store) {
	key := teststores.Unique()
	rt, err := runtime.New(st, runtime.WithLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r28.rerun"
	var answer atomic.Int32 // 0: cannot tell; 1: did not happen
	var reconcilerAsks atomic.Int32
	var inReconciler atomic.Bool
	query := func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if inReconciler.Load() {
			reconcilerAsks.Add(1)
		}
		if answer.Load() == 1 {
			return 0, runtime.OutcomeNotHappened, nil
		}
		return 0, runtime.OutcomeUnknown, errors.New("r28: downstream: 503")
	}
	if err := runtime.Register(rt, op, query, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	call := runtime.Call[string, int]{Operation: op, Key: key, Request: "r", Query: query,
		Effect: func(ctx context.Context, req string) (int, error) { runs.Add(1); return 0, context.DeadlineExceeded }}
	ctx := context.Background()
	if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("run 1: %v, want ErrOutcomeUnknown", err)
	}
	rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileBackoff(10*time.Millisecond, 10*time.Millisecond), runtime.ReconcileLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	inReconciler.Store(true)
	stats, err := rec.RunOnce(ctx)
	inReconciler.Store(false)
	if err != nil || stats.GaveUp != 1 {
		t.Fatalf("reconcile of run 1: %+v, %v; want it given up on", stats, err)
	}
	time.Sleep(50 * time.Millisecond) // the hold-off passes
	answer.Store(1)                   // run 1 did not happen after all
	_, err = runtime.Do(ctx, rt, call)
	t.Logf("duplicate: %v (effect runs %d)", err, runs.Load())
	if runs.Load() != 2 || !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("the schedule did not happen: runs %d, %v", runs.Load(), err)
	}
	r2, _ := st.Get(ctx, runtime.Identity{Operation: op, Key: key})
	t.Logf("run 2's record: state %s attempts %d note %q", r2.State, r2.Attempts, r2.Note)
	answer.Store(0)
	asksBefore := reconcilerAsks.Load()
	inReconciler.Store(true)
	var total runtime.ReconcileStats
	for range 3 {
		time.Sleep(30 * time.Millisecond)
		s, err := rec.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total.Acquired += s.Acquired
		total.GaveUp += s.GaveUp
	}
	inReconciler.Store(false)
	asks := reconcilerAsks.Load() - asksBefore
	t.Logf("reconciler passes after run 2: %+v, queries asked %d", total, asks)
	if asks < 1 && total.Acquired >= 1 && total.GaveUp >= 1 {
		// A reconciler whose lease ran short before the query (a starved
		// process: the renewal's reply came too late to use) does not ask
		// it: the attempt is counted, and on the last one the record is
		// given up on with a note and reported (series 18, load 22). Run
		// 2's record got its attempt either way.
		if r3, err := st.Get(ctx, runtime.Identity{Operation: op, Key: key}); err != nil || !strings.Contains(r3.Note, "gave up") {
			t.Fatalf("run 2's record was given up on without its query, and its note is %q (%v)", r3.Note, err)
		}
		return
	}
	if asks < 1 {
		t.Fatalf("run 2 of the effect ended UNKNOWN, and the reconciler never asked about it (%d queries, %d records acquired, %d given up on): it got 0 of its ReconcileMaxAttempts (1), and the record (attempts %d, note %q) was never reported", asks, total.Acquired, total.GaveUp, r2.Attempts, r2.Note)
	}
}
