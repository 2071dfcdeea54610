package runtime_test

// Adversarial review of issue 17: the lease renewals now run from one timer
// per runtime (a heap of heartbeats), and the effect's and completion's
// contexts are made lazily. These attacks try to make two owners run at
// once, or a renewal be missed, through long effects on tiny leases, mixed
// leases on one runtime (the timer re-armed earlier and later), slow
// renewals, and effects that keep their context past their return.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

// overlapEffect counts runs, completed runs and overlaps of an effect that
// honours its context.
type overlapEffect struct {
	d         time.Duration
	running   atomic.Int32
	runs      atomic.Int32
	completed atomic.Int32
	overlaps  atomic.Int32
}

func (o *overlapEffect) run(ctx context.Context, _ reviewReq) (string, error) {
	o.runs.Add(1)
	if o.running.Add(1) > 1 {
		o.overlaps.Add(1)
	}
	defer o.running.Add(-1)
	t := time.NewTimer(o.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return "", runtime.Retryable(context.Cause(ctx))
	case <-t.C:
	}
	o.completed.Add(1)
	tok, _ := runtime.FencingToken(ctx)
	return fmt.Sprintf("token %d", tok), nil
}

// query is the call's "did it happen?": succeeded once a run completed,
// not happened while none runs, unknown while one does.
func (o *overlapEffect) query(context.Context, reviewReq) (string, runtime.Outcome, error) {
	switch {
	case o.completed.Load() > 0:
		return "done", runtime.OutcomeSucceeded, nil
	case o.running.Load() > 0:
		return "", runtime.OutcomeUnknown, nil
	}
	return "", runtime.OutcomeNotHappened, nil
}

// Promise: an effect that outlives its lease many times over keeps it by
// renewal, so no duplicate runs beside it; the effect runs to completion
// once and every duplicate then replays. Schedule: lease 150ms, effect
// 1.5s (ten leases, thirty renewals); four duplicates retry all along with
// MaxWait 0; on one runtime, a second call with a one-hour lease is in
// flight the whole time (its round due in 20 minutes sits in the same
// timer heap), and short calls come and go (their heartbeats leave the
// heap while the timer stays armed for them).
func TestReview17LongEffectTinyLease(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		starved := stall.Start()
		defer starved.Stop()
		// Renewals that answer late (a starved server) count as the
		// machine's stall too: CI saw every renewal of a run time out.
		store = stall.TimedRenew{Store: store, W: starved}
		rt, err := runtime.New(store, runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		other, err := runtime.New(store, runtime.WithMaxWait(0)) // another worker
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		long := make(chan struct{})
		var longDone sync.WaitGroup
		longDone.Add(1)
		go func() { // one-hour lease, in flight throughout
			defer longDone.Done()
			_, _ = runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "R17.Hour", Key: "h", Lease: time.Hour,
				Effect: func(ctx context.Context, _ reviewReq) (string, error) { <-long; return "", nil }})
		}()
		time.Sleep(20 * time.Millisecond)

		eff := &overlapEffect{d: 1500 * time.Millisecond}
		// A run the lease rule stopped is UNKNOWN (it returns the rule's
		// cause: review r49); the query, which knows the effect, converges
		// it for the duplicates.
		call := runtime.Call[reviewReq, string]{Operation: "R17.Long", Key: "k", Request: reviewReq{1}, Lease: 150 * time.Millisecond, Effect: eff.run,
			Query: eff.query}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var answers sync.Map
		var lostLeases atomic.Int32
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rt
				if w%2 == 1 {
					r = other
				}
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := runtime.Do(ctx, r, call)
					key := "nil"
					if err != nil {
						key = errKind(err)
					}
					if errors.Is(err, runtime.ErrLeaseLost) { // also UNKNOWN, stopped by the lease rule
						lostLeases.Add(1)
					}
					n, _ := answers.LoadOrStore(key, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					if err == nil {
						return
					}
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				}
			}()
		}
		// Short calls come and go on the same runtime meanwhile. On a
		// loaded machine a 30ms lease can lapse before its effect starts
		// (the runtime then refuses to start it and says so) or a duplicate
		// attempt can find it still in progress: such a call is retried, as
		// a client would, and must succeed within a few attempts.
		for i := range 50 {
			short := runtime.Call[reviewReq, string]{Operation: "R17.Short", Key: fmt.Sprintf("s%d", i), Lease: 30 * time.Millisecond,
				Effect: func(context.Context, reviewReq) (string, error) { return "ok", nil }}
			var err error
			for range 10 {
				if _, err = runtime.Do(ctx, rt, short); err == nil {
					break
				}
				t.Logf("short call %d retried: %v", i, err)
				time.Sleep(40 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("short call %d: %v", i, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			close(stop)
			wg.Wait()
			t.Fatal("duplicates did not get the outcome in 20s")
		}
		close(long)
		longDone.Wait()
		var summary []string
		answers.Range(func(k, v any) bool {
			summary = append(summary, fmt.Sprintf("%v=%d", k, v.(*atomic.Int32).Load()))
			return true
		})
		// One run, completed, never two at once. A process that did not
		// run (or a store that did not answer a renewal) for a third of the
		// 150 ms lease loses it to the machine: the
		// lease rule stops that run (a worker is told the lease was lost)
		// and a duplicate runs the effect again, after it (no Query: the
		// at-least-once window); only then may it run twice.
		// A stall also delays the lease rule's own timer: the stopped run
		// can still be running when the duplicate starts (the documented
		// limit past the rule's margin, a tenth of the lease), so with a
		// lost lease each extra run may overlap the one before it.
		// A stopped run that a stall kept from seeing its stop may still
		// complete after the query said it had not happened.
		runs, overlaps, completed := int32(1), int32(0), int32(1)
		if n := lostLeases.Load(); n > 0 {
			if worst := starved.Stop(); worst >= 50*time.Millisecond {
				t.Logf("%d leases were lost while the process stalled for up to %v (the machine's load): a run after each allowed", n, worst)
				runs, overlaps, completed = 1+n, n, 1+n
			}
		}
		if eff.overlaps.Load() > overlaps || eff.completed.Load() < 1 || eff.completed.Load() > completed || eff.runs.Load() < 1 || eff.runs.Load() > runs {
			t.Fatalf("effect ran %d times (%d completed, %d overlaps); want once, no overlap (or as the stalls above allow); answers: %v",
				eff.runs.Load(), eff.completed.Load(), eff.overlaps.Load(), summary)
		}
		t.Logf("answers: %v", summary)
	})
}

func errKind(err error) string {
	for _, s := range []error{runtime.ErrInProgress, runtime.ErrOutcomeUnknown, runtime.ErrLeaseLost, runtime.ErrKeyReused, runtime.ErrNotRecorded} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return err.Error()
}

// lateRenew notes in w how late each renewal of a call started: the time
// since the call's claim or its last renewal, less the third of the lease
// after which the runtime renews.
type lateRenew struct {
	runtime.Store
	w    *stall.Watch
	mu   sync.Mutex
	last map[runtime.Identity]time.Time
}

func (s *lateRenew) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	start := time.Now()
	res, err := s.Store.Claim(ctx, p)
	if err == nil && res.Claimed {
		s.mu.Lock()
		s.last[p.ID] = start
		s.mu.Unlock()
	}
	return res, err
}

func (s *lateRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	now := time.Now()
	s.mu.Lock()
	if t, ok := s.last[p.ID]; ok {
		s.w.Note(now.Sub(t) - p.Lease/3)
	}
	s.last[p.ID] = now
	s.mu.Unlock()
	return s.Store.Renew(ctx, p)
}

// slowRenew delays every Renew by a random part of max: renewals answer
// late, some after the hedge starts another.
type slowRenew struct {
	runtime.Store
	max time.Duration
}

func (s slowRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	select {
	case <-time.After(time.Duration(rand.Int64N(int64(s.max)))):
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	return s.Store.Renew(ctx, p)
}

// Promise (the lease rule): however slow renewals are, two owners never run
// the effect at once; a worker that cannot confirm its lease stops its
// effect before the lease could expire. Schedule: renewals of the first
// worker answer after up to 60% of the lease; a second worker on the plain
// store claims as soon as the lease expires; the effect honours its
// context (it returns the cause, marked Retryable: UNKNOWN all the same,
// the cancellation is in it: review r49), and the call's query knows
// whether it completed. Either the first completes once, or it was stopped
// (UNKNOWN) and the second, told by the query that nothing happened, ran:
// never both at once, never two completions.
func TestReview17SlowRenewalsNoOverlap(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		const lease = 400 * time.Millisecond // a 40ms margin: the effect must see its stop within it
		slow, err := runtime.New(slowRenew{store, lease * 6 / 10}, runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		fast, err := runtime.New(store, runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		for round := range 2 {
			eff := &overlapEffect{d: 2400 * time.Millisecond}
			call := runtime.Call[reviewReq, string]{Operation: "R17.Slow", Key: fmt.Sprintf("k%d", round), Request: reviewReq{1}, Lease: lease, Effect: eff.run,
				Query: eff.query}
			first := make(chan error, 1)
			go func() { _, err := runtime.Do(ctx, slow, call); first <- err }()
			deadline := time.Now().Add(15 * time.Second)
			var last error
			for time.Now().Before(deadline) {
				_, last = runtime.Do(ctx, fast, call)
				if last == nil {
					break
				}
				time.Sleep(15 * time.Millisecond)
			}
			ferr := <-first
			if eff.overlaps.Load() != 0 || eff.completed.Load() != 1 {
				t.Fatalf("round %d: %d runs, %d completed, %d overlaps (first worker: %v; duplicate's last answer: %v); want one completion, no overlap",
					round, eff.runs.Load(), eff.completed.Load(), eff.overlaps.Load(), ferr, last)
			}
		}
	})
}

// Promise: the effect's context behaves as context.WithCancelCause of the
// caller's: it is cancelled when the call ends (for goroutines the effect
// started), carries the attempt after that, and a child made before or
// after the end is cancelled too; a caller's cancellation reaches it with
// the caller's cause. Schedule: effects that keep their context, start
// goroutines on it, and derive children in each order.
func TestReview17EffectContextAfterReturn(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		ctx := reviewCtx()
		var kept context.Context
		var child context.Context
		var afterFired atomic.Bool
		var goroutineSaw = make(chan error, 1)
		_, err = runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "R17.Ctx", Key: "k1", Request: reviewReq{1},
			Effect: func(ctx context.Context, _ reviewReq) (string, error) {
				kept = ctx
				var childCancel context.CancelFunc
				child, childCancel = context.WithTimeout(ctx, time.Hour)
				t.Cleanup(childCancel)
				context.AfterFunc(ctx, func() { afterFired.Store(true) })
				go func() { <-ctx.Done(); goroutineSaw <- context.Cause(ctx) }()
				if ctx.Err() != nil {
					return "", fmt.Errorf("context done during the effect: %w", ctx.Err())
				}
				return "ok", nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-goroutineSaw:
			if !errors.Is(cause, context.Canceled) {
				t.Errorf("goroutine saw cause %v, want context.Canceled", cause)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the effect's context was not cancelled when the call ended")
		}
		if kept.Err() == nil || child.Err() == nil {
			t.Errorf("after the call: effect ctx err %v, child err %v; want both cancelled", kept.Err(), child.Err())
		}
		time.Sleep(10 * time.Millisecond)
		if !afterFired.Load() {
			t.Error("context.AfterFunc on the effect's context did not fire when the call ended")
		}
		if tok, ok := runtime.FencingToken(kept); !ok || tok == 0 {
			t.Error("the attempt is gone from the effect's context after the call")
		}
		late, cancel := context.WithCancel(kept)
		defer cancel()
		if late.Err() == nil {
			t.Error("a child made after the call ended is not cancelled")
		}

		// A context that is never touched during the effect, then used after.
		var untouched context.Context
		if _, err := runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "R17.Ctx", Key: "k2", Request: reviewReq{1},
			Effect: func(ctx context.Context, _ reviewReq) (string, error) { untouched = ctx; return "ok", nil }}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-untouched.Done():
		default:
			t.Error("Done of an untouched effect context is open after the call")
		}
		if !errors.Is(context.Cause(untouched), context.Canceled) {
			t.Errorf("Cause of an untouched effect context after the call: %v", context.Cause(untouched))
		}

		// The caller cancels with a cause while the effect waits.
		cctx, ccancel := context.WithCancelCause(ctx)
		myCause := errors.New("client went away")
		started := make(chan struct{})
		go func() { <-started; ccancel(myCause) }()
		var seen error
		_, err = runtime.Do(cctx, rt, runtime.Call[reviewReq, string]{Operation: "R17.Ctx", Key: "k3", Request: reviewReq{1},
			Effect: func(ctx context.Context, _ reviewReq) (string, error) {
				close(started)
				<-ctx.Done()
				seen = context.Cause(ctx)
				return "", ctx.Err()
			}})
		if !errors.Is(seen, myCause) {
			t.Errorf("effect saw cause %v, want the caller's %v", seen, myCause)
		}
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Errorf("cancelled effect: %v, want ErrOutcomeUnknown", err)
		}
	})
}

// Promise: one timer serves every call in flight: no call's renewal is
// missed however many calls share it, come and go, or are due at once.
// Schedule: on memstore (renewals answer at once), 300 calls with leases of
// 600ms to 1.8s and effects of three leases start together on one runtime,
// while a second runtime sends one duplicate of each key every 40ms. No
// effect may be stopped for a lease it could not confirm, none may run
// twice, every call succeeds.
func TestReview17ManyCallsOneTimer(t *testing.T) {
	starved := stall.Start()
	// Renewals are due every third of a lease; one that starts later than
	// that was held up by the machine (300 calls and their duplicates on
	// two busy cores), however promptly the stall watch's own goroutine
	// woke: a CI run lost a 600 ms lease with the watch at 176 ms.
	store := &lateRenew{Store: teststores.Memory(t), w: starved, last: map[runtime.Identity]time.Time{}}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := runtime.New(store, runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	const n = 300
	var runs [n]atomic.Int32
	var lost, failed atomic.Int32
	var lostKey [n]atomic.Bool
	call := func(i int) runtime.Call[reviewReq, string] {
		// Leases of 150 to 450ms lost renewals on a CI machine whose two
		// cores were busy with other packages' tests: a round that starts
		// past the lease's safe end (the process starved, not the timer)
		// has a quick renewal of a few milliseconds, and stops the effect
		// when it is not answered in time. Those leases were 4 times
		// shorter than this; the promise under test is the shared timer's.
		lease := time.Duration(600+i%3*600) * time.Millisecond
		return runtime.Call[reviewReq, string]{Operation: "R17.Many", Key: fmt.Sprint("k", i), Request: reviewReq{i}, Lease: lease,
			Effect: func(ctx context.Context, _ reviewReq) (string, error) {
				runs[i].Add(1)
				select {
				case <-ctx.Done():
					return "", context.Cause(ctx)
				case <-time.After(3 * lease):
					return "ok", nil
				}
			}}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := runtime.Do(ctx, rt, call(i)); err != nil {
				if errors.Is(err, runtime.ErrLeaseLost) {
					lost.Add(1)
					lostKey[i].Store(true)
				} else {
					failed.Add(1)
				}
				t.Logf("call %d: %v", i, err)
			}
		}()
	}
	var dups sync.WaitGroup
	dups.Add(1)
	go func() {
		defer dups.Done()
		// Duplicates start once every call has claimed its key and runs
		// its effect (on a loaded machine the last of 300 goroutines may
		// start long after the first): a duplicate that came first would
		// claim the key itself and tell the call it is in progress.
		for started := 0; started < n; {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			started = 0
			for i := range n {
				if runs[i].Load() > 0 {
					started++
				}
			}
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			for i := range n {
				_, _ = runtime.Do(ctx, dup, call(i))
			}
		}
	}()
	wg.Wait()
	close(stop)
	dups.Wait()
	// A lease is lost to the machine, not to the shared timer, when the
	// process did not run for a third of the shortest lease (600 ms): a
	// renewal due at a third of the lease then starts near its safe end.
	// Its effect was stopped, and a duplicate may run it again (no Query:
	// the at-least-once window the README describes). On a machine that
	// ran the test without such a stall, every lease must hold and every
	// effect run once.
	worst := starved.Stop()
	excused := lost.Load() != 0 && worst >= 200*time.Millisecond
	if excused {
		t.Logf("%d calls lost their lease while the process stalled for up to %v (the machine's load): not counted", lost.Load(), worst)
		lost.Store(0)
	}
	twice := 0
	for i := range n {
		if r := runs[i].Load(); r != 1 && !(excused && lostKey[i].Load() && r == 2) {
			twice++
		}
	}
	if lost.Load() != 0 || failed.Load() != 0 || twice != 0 {
		t.Fatalf("%d calls lost their lease (longest scheduler stall %v), %d failed otherwise, %d effects ran other than once", lost.Load(), worst, failed.Load(), twice)
	}
	if c, at := runtime.RenewalsScheduled(rt); c != 0 {
		t.Errorf("%d heartbeats left scheduled (timer at %v) after every call ended", c, at)
	}
}
