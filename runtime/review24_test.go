package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r24unknown leaves op/key UNKNOWN (an unclassified error).
func r24unknown(t *testing.T, rt *runtime.Runtime, op, key string) {
	t.Helper()
	_, err := runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: op, Key: key, Request: key,
		Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified: UNKNOWN") }})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("%s: want ErrOutcomeUnknown, got %v", key, err)
	}
}

// Row 25.33: "a query that ignores its context and hangs (the rest of its
// batch waited behind it, acquired, past their lease)" is said fixed: a
// query runs on its own goroutine, bounded by the query timeout plus 100 ms.
// But the bound is min(query timeout, reconcile lease) + 100 ms: whenever the
// reconcile lease is not above the query timeout (the lease is the
// documented knob; the query timeout defaults to 5 s), one hung query makes
// the next record of the batch wait past its lease. Schedule: batch {a, b};
// a's query hangs; b's query runs ~lease+100ms after the acquisition, when
// b's lease has expired and anyone (a second reconciler, a duplicate with a
// query) may hold it.
func TestR24ReconcilerHungQueryRestPastLease(t *testing.T) {
	st := memstore.New()
	rt, err := runtime.New(st, runtime.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r24.hung"
	r24unknown(t, rt, op, "a")
	r24unknown(t, rt, op, "b")
	release := make(chan struct{})
	defer close(release)
	var bLive atomic.Int32 // 1 live, 2 expired
	var bAsked atomic.Bool
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if req == "a" {
			<-release // ignores its context
			return 0, runtime.OutcomeUnknown, nil
		}
		bAsked.Store(true)
		rec, err := st.Get(context.Background(), runtime.Identity{Operation: op, Key: "b"})
		if err != nil {
			t.Errorf("get b: %v", err)
		}
		if rec.LeaseLive() {
			bLive.Store(1)
		} else {
			bLive.Store(2)
		}
		return 7, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := runtime.NewReconciler(rt, runtime.ReconcileLease(300*time.Millisecond), runtime.ReconcileBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	// a first: the store hands out the batch in its order (a is older).
	if _, err := rc.RunOnce(context.Background()); err != nil {
		t.Logf("RunOnce: %v", err)
	}
	if !bAsked.Load() {
		t.Skip("b not asked in this pass")
	}
	if bLive.Load() != 1 {
		t.Fatalf("b's query was asked after b's reconcile lease (300ms) expired: one hung query held the rest of its batch past their lease (row 25.33)")
	}
}

// r24GoexitErr is a query's error whose methods call runtime.Goexit (code
// of the caller's, as a query is: a t.FailNow in a test double, say).
type r24GoexitErr struct{ inError, inCode bool }

func (e *r24GoexitErr) Error() string {
	if e.inError {
		goruntime.Goexit()
	}
	return "r24: cannot tell"
}

func (e *r24GoexitErr) ErrorCode() string {
	if e.inCode {
		goruntime.Goexit()
	}
	return "r24"
}

// r24Run runs f on a goroutine of its own and says whether it returned.
func r24Run(f func()) bool {
	done := make(chan bool, 1)
	go func() {
		returned := false
		defer func() { done <- returned }()
		f()
		returned = true
	}()
	return <-done
}

// Row 25.33 (and 25.28, 25.32): a query that calls runtime.Goexit no
// longer leaves its record with every attempt used, never given up on nor
// reported: the query runs on its own goroutine. But the query's answer is
// still read on the reconciler's goroutine: the give-up note calls the
// error's Error (under recover, which a Goexit passes through), and a
// FAILED answer's failure calls its Error and ErrorCode (EncodeFailure).
// A Goexit there ends the convergence before the answer's write: the
// record stays UNKNOWN with the attempt used, and once it has used them
// all it is skipped for good, never given up on (no note, no
// EventReconcileGaveUp), never reported.
func TestR24ReconcilerQueryErrorGoexits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome runtime.Outcome
		err     *r24GoexitErr
	}{
		{"unknown-last-attempt-Error", runtime.OutcomeUnknown, &r24GoexitErr{inError: true}},
		{"failed-Error", runtime.OutcomeFailed, &r24GoexitErr{inError: true}},
		{"failed-ErrorCode", runtime.OutcomeFailed, &r24GoexitErr{inCode: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New()
			var gaveUp, converged atomic.Int32
			rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
				switch e.Kind {
				case runtime.EventReconcileGaveUp:
					gaveUp.Add(1)
				case runtime.EventReconciled:
					converged.Add(1)
				}
			})))
			if err != nil {
				t.Fatal(err)
			}
			op := "r24.errgoexit." + tc.name
			if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
				return 0, tc.outcome, tc.err
			}, runtime.QueryOptions{}); err != nil {
				t.Fatal(err)
			}
			r24unknown(t, rt, op, "k")
			r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(2), runtime.ReconcileLease(30*time.Millisecond),
				runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for pass := 1; pass <= 5; pass++ {
				returned := r24Run(func() { _, _ = r.RunOnce(ctx) })
				t.Logf("pass %d: returned %v", pass, returned)
				time.Sleep(60 * time.Millisecond)
			}
			rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("record %s, attempts %d, note %q, gave-up events %d, reconciled events %d", rec.State, rec.Attempts, rec.Note, gaveUp.Load(), converged.Load())
			if rec.State == runtime.StateUnknown && rec.Attempts >= 2 && gaveUp.Load() == 0 && rec.Note == "" {
				t.Errorf("the record used its %d attempts and is skipped for good, never given up on nor reported", rec.Attempts)
			}
		})
	}
}

// r24SmallStore refuses responses over 64 bytes, as pgstore and redisstore
// do over their limits.
type r24SmallStore struct{ *memstore.Store }

func (s r24SmallStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response) > 64 {
		return 0, runtime.ErrTooLarge
	}
	return s.Store.Transition(ctx, p)
}

// r24Big is a response too large for r24SmallStore whose Cut calls Goexit.
type r24Big struct{ Blob string }

func (r24Big) Cut() r24Big {
	goruntime.Goexit()
	return r24Big{}
}

// The same as TestR24ReconcilerQueryErrorGoexits, through the size rule: a
// query that answers SUCCEEDED with a response the store refuses whole has
// its Cut called on the reconciler's goroutine (fitTransition), under
// recover only. A Cut that calls Goexit ends the convergence before the
// answer is written: every attempt is used, the record skipped for good,
// never given up on nor reported. (In Do the same Cut is covered: the
// inline query's call gives its claim back as UNKNOWN.)
func TestR24ReconcilerCutGoexits(t *testing.T) {
	s := memstore.New()
	var gaveUp, converged atomic.Int32
	rt, err := runtime.New(r24SmallStore{s}, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		switch e.Kind {
		case runtime.EventReconcileGaveUp:
			gaveUp.Add(1)
		case runtime.EventReconciled:
			converged.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r24.cutgoexit"
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (r24Big, runtime.Outcome, error) {
		return r24Big{Blob: string(make([]byte, 200))}, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r24unknown(t, rt, op, "k")
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(2), runtime.ReconcileLease(30*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := 1; pass <= 5; pass++ {
		returned := r24Run(func() { _, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: returned %v", pass, returned)
		time.Sleep(60 * time.Millisecond)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record %s, attempts %d, note %q, gave-up events %d, reconciled events %d", rec.State, rec.Attempts, rec.Note, gaveUp.Load(), converged.Load())
	if rec.State == runtime.StateUnknown && rec.Attempts >= 2 && gaveUp.Load() == 0 && rec.Note == "" {
		t.Errorf("the query found the effect done, yet the record used its %d attempts and is skipped for good, never converged, given up on nor reported", rec.Attempts)
	}
}

// The same class through the observer: converge reports PhaseReconcile to
// the observer after the query answered and before the answer is written,
// on the reconciler's goroutine. An observer that calls Goexit there (the
// review-23 tests have it Goexit on EventReconciled, after the write) ends
// the convergence with the query's answer unwritten: every pass uses an
// attempt, and the record is skipped for good, never converged (the query
// said SUCCEEDED), given up on nor reported.
func TestR24ReconcilerPhaseObserverGoexits(t *testing.T) {
	s := memstore.New()
	rt0, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const op = "r24.phasegoexit"
	r24unknown(t, rt0, op, "k")
	var gaveUp, converged, goexits atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		switch {
		case e.Kind == runtime.EventReconcileGaveUp:
			gaveUp.Add(1)
		case e.Kind == runtime.EventReconciled:
			converged.Add(1)
		case e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseReconcile:
			goexits.Add(1)
			goruntime.Goexit()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(2), runtime.ReconcileLease(30*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := 1; pass <= 5; pass++ {
		returned := r24Run(func() { _, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: returned %v", pass, returned)
		time.Sleep(60 * time.Millisecond)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record %s, attempts %d, note %q, goexits %d, gave-up events %d, reconciled events %d", rec.State, rec.Attempts, rec.Note, goexits.Load(), gaveUp.Load(), converged.Load())
	if rec.State == runtime.StateUnknown && rec.Attempts >= 2 && gaveUp.Load() == 0 && rec.Note == "" {
		t.Errorf("the query found the effect done, yet the record used its %d attempts and is skipped for good, never converged, given up on nor reported", rec.Attempts)
	}
}

// F1's consequence: "each record is acquired with a lease by
// compare-and-set, so two never converge the same record" (Reconciler's
// doc). R1's batch {a, b}: a's query hangs; b's lease runs out behind it;
// R2 acquires b and starts converging it; then R1, back from a, asks b's
// query too, for a record R2 holds: two reconcilers converge b at once.
func TestR24TwoReconcilersConvergeOneRecord(t *testing.T) {
	st := memstore.New()
	rt0, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	const op = "r24.two"
	r24unknown(t, rt0, op, "a")
	r24unknown(t, rt0, op, "b")
	id := runtime.Identity{Operation: op, Key: "b"}
	release := make(chan struct{})
	defer close(release)
	r2Holds := make(chan struct{}) // R2 is in b's query
	r1Asked := make(chan struct{}) // R1 asked b's query
	var r1Owner atomic.Value       // owner of b then
	var aOnce atomic.Bool
	mk := func(owner string, q runtime.QueryFunc[string, int]) *runtime.Reconciler {
		rt, err := runtime.New(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := runtime.Register(rt, op, q, runtime.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
		r, err := runtime.NewReconciler(rt, runtime.ReconcileOwner(owner), runtime.ReconcileLease(300*time.Millisecond), runtime.ReconcileBatch(2))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r1 := mk("r1", func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if req == "a" {
			if aOnce.CompareAndSwap(false, true) {
				<-release // ignores its context
			}
			return 0, runtime.OutcomeUnknown, nil
		}
		rec, _ := st.Get(context.Background(), id)
		r1Owner.Store(rec.Owner)
		close(r1Asked)
		return 7, runtime.OutcomeSucceeded, nil
	})
	r2 := mk("r2", func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		if req == "a" {
			return 0, runtime.OutcomeUnknown, nil
		}
		close(r2Holds)
		select { // converging b, slowly (within its lease)
		case <-r1Asked:
		case <-time.After(250 * time.Millisecond):
		}
		return 7, runtime.OutcomeSucceeded, nil
	})
	done := make(chan runtime.ReconcileStats, 1)
	go func() {
		s, _ := r1.RunOnce(context.Background())
		done <- s
	}()
	time.Sleep(330 * time.Millisecond) // b's (and a's) R1 lease has run out; R1 still waits on a
	go func() { _, _ = r2.RunOnce(context.Background()) }()
	select {
	case <-r2Holds:
	case <-time.After(2 * time.Second):
		t.Skip("R2 never took b")
	}
	s1 := <-done
	owner, _ := r1Owner.Load().(string)
	t.Logf("R1 stats %+v; b's owner when R1 asked its query: %q", s1, owner)
	if owner != "" && owner != "r1" && !strings.HasPrefix(owner, "r1") {
		t.Errorf("R1 asked b's query while %q held b: two reconcilers converged the same record", owner)
	}
}

// r24FailRenew fails every Renew with a transient error (a store outage
// for renewals only).
type r24FailRenew struct{ *memstore.Store }

func (s r24FailRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	return time.Time{}, errors.New("r24: renew: connection refused")
}

// r24GoexitLog is a log handler that calls runtime.Goexit on one message.
type r24GoexitLog struct {
	msg string
	hit *atomic.Int32
}

func (h r24GoexitLog) Enabled(context.Context, slog.Level) bool { return true }
func (h r24GoexitLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.hit.Add(1)
		goruntime.Goexit()
	}
	return nil
}
func (h r24GoexitLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h r24GoexitLog) WithGroup(string) slog.Handler      { return h }

// The lease rule (README): "A worker that cannot confirm its lease stops its
// effect before the lease can expire ... With an effect that honours its
// context, two owners never overlap." The renewal round runs on a goroutine
// of its own and calls the log handler ("renewing lease failed; retrying",
// "the lease could not be renewed in time ...", "lease lost while the effect
// ran") BEFORE it stops the effect. Row 25.31 treats a log handler that calls
// runtime.Goexit as code of the caller's to survive; here it ends the round:
// the effect is never stopped, the heartbeat never rescheduled. Schedule:
// lease 300 ms; every Renew fails; the first failure's log line Goexits the
// round; the effect (which honours its context) runs on past its lease; a
// duplicate takes the expired lease over and runs the effect beside it.
func TestR24RenewLogGoexitOverlapsOwners(t *testing.T) {
	for _, msg := range []string{"renewing lease failed", "could not be renewed in time"} {
		t.Run(msg, func(t *testing.T) {
			var hit atomic.Int32
			s := r24FailRenew{memstore.New()}
			rt, err := runtime.New(s, runtime.WithLease(300*time.Millisecond),
				runtime.WithLogger(slog.New(r24GoexitLog{msg: msg, hit: &hit})))
			if err != nil {
				t.Fatal(err)
			}
			var running, overlap, runs atomic.Int32
			effect := func(ctx context.Context, _ string) (int, error) {
				runs.Add(1)
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				select { // honours its context
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(900 * time.Millisecond):
					return 1, nil
				}
			}
			call := runtime.Call[string, int]{Operation: "r24.renewlog", Key: "k", Request: "r", Effect: effect}
			first := make(chan error, 1)
			go func() {
				_, err := runtime.Do(context.Background(), rt, call)
				first <- err
			}()
			time.Sleep(450 * time.Millisecond) // past the 300 ms lease
			rt2, err := runtime.New(s.Store, runtime.WithLease(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			_, err2 := runtime.Do(context.Background(), rt2, call)
			err1 := <-first
			t.Logf("log Goexits %d; runs %d, overlapping %d; first: %v; duplicate: %v", hit.Load(), runs.Load(), overlap.Load(), err1, err2)
			if overlap.Load() > 0 {
				t.Errorf("two owners' effects ran at once: the renewal round died in the log handler before stopping the effect")
			}
		})
	}
}

// r24SlowLog is a log handler that blocks on one message (a synchronous
// sink stalled by the same outage that fails the renewals).
type r24SlowLog struct {
	msg   string
	delay time.Duration
	hit   *atomic.Int32
}

func (h r24SlowLog) Enabled(context.Context, slog.Level) bool { return true }
func (h r24SlowLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.hit.Add(1)
		time.Sleep(h.delay)
	}
	return nil
}
func (h r24SlowLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h r24SlowLog) WithGroup(string) slog.Handler      { return h }

// F6 without Goexit: the renewal round calls the log handler synchronously
// ("renewing lease failed; retrying") on its way to stopping the effect, and
// holds the round meanwhile. A handler that blocks past the lease (a log
// sink stalled by the same outage) delays the stop past the lease's
// expiry: a duplicate takes over and runs the effect beside the first.
func TestR24RenewSlowLogOverlapsOwners(t *testing.T) {
	var hit atomic.Int32
	s := r24FailRenew{memstore.New()}
	rt, err := runtime.New(s, runtime.WithLease(300*time.Millisecond),
		runtime.WithLogger(slog.New(r24SlowLog{msg: "renewing lease failed", delay: 700 * time.Millisecond, hit: &hit})))
	if err != nil {
		t.Fatal(err)
	}
	var running, overlap, runs, completed atomic.Int32
	effect := func(ctx context.Context, _ string) (int, error) {
		runs.Add(1)
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(900 * time.Millisecond):
			completed.Add(1)
			return 1, nil
		}
	}
	call := runtime.Call[string, int]{Operation: "r24.slowlog", Key: "k", Request: "r", Effect: effect}
	first := make(chan error, 1)
	go func() {
		_, err := runtime.Do(context.Background(), rt, call)
		first <- err
	}()
	time.Sleep(450 * time.Millisecond)
	rt2, err := runtime.New(s.Store, runtime.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err2 := runtime.Do(context.Background(), rt2, call)
	err1 := <-first
	t.Logf("slow log lines %d; runs %d, overlapping %d, completed %d; first: %v; duplicate: %v", hit.Load(), runs.Load(), overlap.Load(), completed.Load(), err1, err2)
	if overlap.Load() > 0 {
		t.Errorf("two owners' effects ran at once: a slow log handler in the renewal round delayed stopping the effect past its lease")
	}
}
