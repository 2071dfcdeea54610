package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/idemkit/idem/runtime/internal/errtree"
)

// Reconciler converges records whose outcome is unknown: UNKNOWN records,
// and PROCESSING records whose lease expired because their worker died. For
// each it asks the operation's registered query (see [Register]) whether the
// effect happened, and records SUCCESS, FAILED, or releases the record,
// according to the answer and the operation's [NotHappenedPolicy]. When the
// query cannot tell, the record stays UNKNOWN and is retried with
// exponential backoff and jitter; after MaxAttempts it is left UNKNOWN and
// reported (log and [EventReconcileGaveUp]), never dropped.
//
// Any number of reconcilers, in any number of processes, may run at once:
// each record is acquired with a lease by compare-and-set, so two never
// converge the same record. A reconciler only takes records of operations
// registered on its runtime.
type Reconciler struct {
	rt  *Runtime
	cfg reconcilerConfig
}

type reconcilerConfig struct {
	owner       string
	batch       int
	interval    time.Duration
	lease       time.Duration
	maxAttempts int32
	baseBackoff time.Duration
	maxBackoff  time.Duration
	rand        func() float64
}

// ReconcilerOption configures a [Reconciler].
type ReconcilerOption func(*reconcilerConfig) error

// ReconcileBatch sets how many records one store call acquires (default 100).
func ReconcileBatch(n int) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if n <= 0 {
			return fmt.Errorf("idem: reconcile batch must be positive, got %d", n)
		}
		c.batch = n
		return nil
	}
}

// ReconcileInterval sets how long Run sleeps when a pass found nothing
// (default 1s).
func ReconcileInterval(d time.Duration) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if d <= 0 {
			return fmt.Errorf("idem: reconcile interval must be positive, got %v", d)
		}
		c.interval = d
		return nil
	}
}

// ReconcileLease sets how long an acquired record is held while its query
// runs (default 30s); a reconciler that dies releases it by expiry.
func ReconcileLease(d time.Duration) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("idem: reconcile lease must be at least 10ms, got %v", d)
		}
		c.lease = d
		return nil
	}
}

// ReconcileMaxAttempts sets after how many inconclusive queries a record is
// given up on (default 20).
func ReconcileMaxAttempts(n int) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if n <= 0 || n > 1<<30 {
			return fmt.Errorf("idem: reconcile max attempts must be positive, got %d", n)
		}
		c.maxAttempts = int32(n)
		return nil
	}
}

// ReconcileBackoff sets the backoff after an inconclusive query: base ×
// 2^(attempts-1), capped at max, with full jitter, and never under 10 ms,
// whatever max (defaults 1s and 10m).
func ReconcileBackoff(base, max time.Duration) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if base <= 0 || max < base {
			return fmt.Errorf("idem: reconcile backoff needs 0 < base <= max, got %v, %v", base, max)
		}
		c.baseBackoff, c.maxBackoff = base, max
		return nil
	}
}

// ReconcileOwner sets the owner id written into acquired records (default:
// the runtime's owner with "/reconciler").
func ReconcileOwner(owner string) ReconcilerOption {
	return func(c *reconcilerConfig) error {
		if owner == "" || len(owner) > MaxKeyLen {
			return fmt.Errorf("idem: reconcile owner must be 1 to %d bytes", MaxKeyLen)
		}
		c.owner = owner
		return nil
	}
}

// NewReconciler returns a reconciler converging records of the operations
// registered on rt.
func NewReconciler(rt *Runtime, opts ...ReconcilerOption) (*Reconciler, error) {
	if rt == nil {
		return nil, errors.New("idem: reconciler: runtime is nil")
	}
	cfg := reconcilerConfig{
		owner: rt.cfg.owner + "/reconciler", batch: 100, interval: time.Second, lease: 30 * time.Second,
		maxAttempts: 20, baseBackoff: time.Second, maxBackoff: 10 * time.Minute, rand: rand.Float64,
	}
	if len(cfg.owner) > MaxKeyLen {
		cfg.owner = cfg.owner[len(cfg.owner)-MaxKeyLen:]
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Reconciler{rt: rt, cfg: cfg}, nil
}

// ReconcileStats counts what a pass did.
type ReconcileStats struct {
	// Acquired records, and what became of them.
	Acquired  int
	Succeeded int
	Failed    int
	Released  int
	// StillUnknown were left UNKNOWN to be retried after a backoff.
	StillUnknown int
	// GaveUp reached MaxAttempts and stay UNKNOWN for a human.
	GaveUp int
	// LeaseLost were taken from this reconciler before it finished.
	LeaseLost int
}

func (s *ReconcileStats) add(o ReconcileStats) {
	s.Acquired += o.Acquired
	s.Succeeded += o.Succeeded
	s.Failed += o.Failed
	s.Released += o.Released
	s.StillUnknown += o.StillUnknown
	s.GaveUp += o.GaveUp
	s.LeaseLost += o.LeaseLost
}

// RunOnce makes one pass: it acquires and converges batches until no due
// record is left, and returns what it did. Use it from cron-style jobs.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileStats, error) {
	var total ReconcileStats
	queried, noQuery := r.rt.operationsByKind()
	// Operations with a query give up after MaxAttempts; those resolved by
	// a no-query policy have no attempts to give up on, however often a
	// fault made the reconciler acquire them again: their records are
	// acquired whatever their attempts, until the policy resolves them.
	for _, kind := range []struct {
		ops         []string
		maxAttempts int32
	}{{queried, r.cfg.maxAttempts}, {noQuery, 0}} {
		if len(kind.ops) == 0 {
			continue
		}
		if err := r.runOps(ctx, kind.ops, kind.maxAttempts, &total); err != nil {
			return total, err
		}
	}
	return total, nil
}

// runOps acquires and converges batches of records of ops until none is
// left.
func (r *Reconciler) runOps(ctx context.Context, ops []string, maxAttempts int32, total *ReconcileStats) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		acquired := time.Now() // the batch's leases hold from here
		recs, err := r.rt.store.AcquirePending(ctx, AcquireParams{
			Owner: r.cfg.owner, Lease: r.cfg.lease, Limit: r.cfg.batch, MaxAttempts: maxAttempts, Operations: ops,
		})
		var errs []error
		if err != nil {
			// The records taken before the error are this reconciler's:
			// converge them before reporting it, or they would stay
			// UNKNOWN with an attempt used and their query never asked.
			errs = append(errs, fmt.Errorf("idem: reconciler: acquiring records: %w", err))
		}
		// Every record acquired is converged, even when one's convergence
		// does not return (runtime.Goexit in its query, a panic in code of
		// the caller's): the rest were acquired too, an attempt used each,
		// and would otherwise use their attempts unqueried. They are
		// converged on the way out.
		// Each way out is a deferred call of its own: a Goexit in a
		// deferred call ends that call (and goes on with the deferred
		// calls below it), so one way out would end at the second.
		next := 0
		var rest func()
		rest = func() {
			defer func() {
				if next < len(recs) {
					rest()
				}
			}()
			for next < len(recs) {
				rec := recs[next]
				next++
				st, err := r.converge(ctx, rec, acquired)
				total.add(st)
				if err != nil {
					errs = append(errs, err)
				}
			}
		}
		rest()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if len(recs) < r.cfg.batch {
			return nil
		}
	}
}

// Run reconciles until ctx is cancelled, sleeping Interval after a pass
// that found nothing. Store errors are logged and retried; Run returns nil
// when ctx is cancelled.
func (r *Reconciler) Run(ctx context.Context) error {
	for {
		st, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.rt.cfg.logger.ErrorContext(ctx, "idem: reconcile pass failed", "err", err)
		}
		if st.Acquired > 0 && err == nil {
			continue
		}
		if sleepCtx(ctx, r.cfg.interval) != nil {
			return nil
		}
	}
}

// converge asks the query about one acquired record (its lease held from
// acquired) and records the answer.
//
// Code of the caller's runs on the reconciler's goroutine before the
// answer is written (an observer of the phase, an error's methods, a
// response's Cut): one that calls runtime.Goexit there leaves the record
// as a query that cannot tell would (see [Reconciler.leaveRecord]), so
// that its attempt is counted honestly and, on the last one, it is given
// up on with a note.
func (r *Reconciler) converge(ctx context.Context, rec Record, acquired time.Time) (ReconcileStats, error) {
	rt := r.rt
	q, ok := rt.query(rec.ID.Operation)
	if !ok { // unregistered since the batch was taken: let it go
		_, err := rt.store.Transition(ctx, TransitionParams{ID: rec.ID, From: StateUnknown, Owner: r.cfg.owner, Version: rec.Version, To: StateUnknown})
		return ReconcileStats{Acquired: 1, StillUnknown: 1}, ignoreLeaseLost(err)
	}
	if q.run == nil {
		return r.resolveNoQuery(ctx, rec, q)
	}
	written, returned := false, false
	defer func() {
		if !returned && !written {
			r.leaveRecord(ctx, rec, errConvergenceExited)
		}
	}()
	st, err := r.ask(ctx, rec, q, acquired, &written)
	returned = true
	return st, err
}

// leaveRecord writes what a query that cannot tell leaves, for a record
// whose query was not asked or whose answer was not written (why): its
// attempt counted, and on the last one given up on, with a note, and
// reported. It reports whether it gave up.
func (r *Reconciler) leaveRecord(ctx context.Context, rec Record, why error) (gaveUp bool) {
	rt := r.rt
	tp := TransitionParams{ID: rec.ID, From: StateUnknown, Owner: r.cfg.owner, Version: rec.Version, To: StateUnknown,
		Lease: r.backoff(rec.Attempts), Token: rt.newToken()}
	if rec.Attempts >= r.cfg.maxAttempts {
		tp.Note = fmt.Sprintf("reconcile gave up after %d attempts: %s", rec.Attempts, errorText(why))
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.completionTimeout)
	defer cancel()
	err := retryWrite(cctx, nil, func(wctx context.Context) error {
		_, err := rt.store.Transition(wctx, tp)
		return err
	}, nil)
	// On its last attempt the record is given up on: with its note, or,
	// when the store would not take the write (no reconciler acquires it
	// again either way), without, and reported all the same.
	gaveUp = tp.Note != ""
	rt.cfg.logger.ErrorContext(ctx, "idem: reconcile: the record was left UNKNOWN as for a query that cannot tell",
		"operation", rec.ID.Operation, "key", rec.ID.Key, "scope", rec.ID.Scope, "attempts", rec.Attempts, "gave_up", gaveUp, "why", why, "err", err)
	if gaveUp {
		rt.emit(ctx, Event{Kind: EventReconcileGaveUp, Operation: rec.ID.Operation, State: StateUnknown, Err: errors.Join(why, err)})
	}
	return gaveUp
}

// ask runs one record's query and writes its answer; *written is set once
// the write has returned.
func (r *Reconciler) ask(ctx context.Context, rec Record, q registeredQuery, acquired time.Time, written *bool) (ReconcileStats, error) {
	st := ReconcileStats{Acquired: 1}
	rt, op := r.rt, rec.ID.Operation
	// The batch's records are asked one after another under one lease. The
	// query, the wait for its answer (grace) and a tenth of the lease for
	// the answer's write must fit in what is left of the lease, counted
	// from when the write that granted it was sent: a record whose turn
	// comes late (slow queries before it) has its lease renewed first, so
	// that its query never runs, nor its answer is written, after another
	// reconciler could have acquired it.
	grace := r.grace()
	want := min(rt.cfg.queryTimeout, r.cfg.lease-r.cfg.lease/10-grace)
	left := func() time.Duration { return r.cfg.lease - time.Since(acquired) - r.cfg.lease/10 - grace }
	if left() < want/2 && context.Cause(ctx) == nil {
		sent := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, r.cfg.lease/10)
		_, err := rt.store.Renew(rctx, RenewParams{ID: rec.ID, State: StateUnknown, Owner: r.cfg.owner, Version: rec.Version, Lease: r.cfg.lease})
		rcancel()
		if err == nil {
			acquired = sent
			if left() < want/4 { // the renewal's reply came too late to use it
				err = fmt.Errorf("its reply came %v after it was sent", time.Since(sent).Round(time.Millisecond))
			}
		}
		if err != nil {
			*written = true
			if errors.Is(err, ErrLeaseLost) { // another reconciler's now
				st.LeaseLost++
				return st, nil
			}
			// Its query is not asked; the attempt acquiring it used is
			// counted, and on the last one it is given up on and reported.
			if r.leaveRecord(ctx, rec, fmt.Errorf("idem: reconciler: renewing the lease before its query: %w", err)) {
				st.GaveUp++
			} else {
				st.StillUnknown++
			}
			return st, nil
		}
	}
	start := time.Now()
	// The query and the wait for it end before the lease could: its
	// answer is written under the lease the record was asked under.
	timeout := min(want, max(left(), 0))
	// The query runs in the record's scope, as the effect did: a
	// tenant-scoped downstream looks the effect up by it.
	qctx, cancel := context.WithTimeout(withAttempt(WithScope(ctx, rec.ID.Scope), rt, rec.ID, rec.Version, true), timeout)
	var resp []byte
	var short responseCutter
	var outcome Outcome
	var qerr error
	if cerr := context.Cause(ctx); cerr != nil {
		// The reconciler is stopping (Run's context ended mid-batch): the
		// query is not asked with a dead context. The acquisition has used
		// an attempt, which the store cannot give back: on its last one the
		// record is given up on, and reported, with this note.
		outcome, qerr = OutcomeUnknown, fmt.Errorf("idem: reconciler: stopped before asking the query: %w", cerr)
	} else {
		resp, short, outcome, qerr = askQuery(qctx, q, rec.Request, grace)
	}
	cancel()
	rt.phase(ctx, op, PhaseReconcile, start)

	tp := TransitionParams{ID: rec.ID, From: StateUnknown, Owner: r.cfg.owner, Version: rec.Version, Token: rt.newToken()}
	ttl := q.opts.TTL
	if ttl <= 0 {
		ttl = rt.cfg.ttl
	}
	release := false
	switch outcome {
	case OutcomeSucceeded:
		tp.To, tp.Response, tp.TTL = StateSuccess, resp, ttl
		if qerr != nil {
			// The query found the effect done, and its response could not
			// be encoded (see Register): recorded without it, as a call's
			// inline query records it (duplicates get ErrNotReplayable).
			// Kept UNKNOWN, the record would wait for a person although
			// the query told.
			tp.ResponseOmitted, tp.Note = true, "response not stored: "+errorText(qerr)
		}
	case OutcomeFailed:
		tp.To, tp.Response, tp.TTL = StateFailed, EncodeFailure(qerr), ttl
	case OutcomeNotHappened:
		if q.opts.NotHappened == NotHappenedFail {
			tp.To, tp.Response, tp.TTL = StateFailed, EncodeFailure(errors.New("the effect did not happen")), ttl
		} else {
			release = true
		}
	default:
		tp.To, tp.Lease = StateUnknown, r.backoff(rec.Attempts)
		if rec.Attempts >= r.cfg.maxAttempts {
			tp.Note = fmt.Sprintf("reconcile gave up after %d attempts", rec.Attempts)
			if qerr != nil {
				tp.Note += ": " + errorText(qerr)
			}
		}
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.completionTimeout)
	defer ccancel()
	// Retried through transient store errors, as a call's completion is
	// (the token recognises a write applied whose reply was lost): an
	// answer lost to one blip would leave the record with an attempt used,
	// on its last one for good, neither converged nor reported.
	var applied func(context.Context) (bool, error)
	if release {
		applied = releaseApplied(rt.store, rec.ID, rec.CreatedAt)
	}
	err := retryWrite(cctx, applied, func(wctx context.Context) error {
		if release {
			return rt.store.Release(wctx, ReleaseParams{ID: rec.ID, State: StateUnknown, Owner: r.cfg.owner, Version: rec.Version})
		}
		// The size rule shrinks tp in place, so a retry resends the write
		// that may have been applied (a store knows it by its token only
		// once it accepts its size), as a call's completion does.
		var err error
		if tp.To == StateSuccess && short != nil {
			_, err = fitTransition(wctx, rt.store, &tp, short) // the size rule, with the response's short form
		} else {
			_, err = rt.transitionStore(wctx, &tp)
		}
		return err
	}, nil)
	*written = true
	if errors.Is(err, ErrLeaseLost) {
		st.LeaseLost++
		rt.emit(ctx, Event{Kind: EventLeaseLost, Operation: op, State: StateUnknown, Err: err})
		return st, nil
	}
	if err != nil {
		err = fmt.Errorf("idem: reconciler: %s %q: recording the outcome: %w", op, rec.ID.Key, err)
		if rec.Attempts >= r.cfg.maxAttempts {
			// Its last attempt is used and no reconciler acquires it
			// again: it stays UNKNOWN, listed by its attempts (idemctl
			// list -gave-up), with no note (the store refused it). It is
			// reported here, as a record given up on.
			st.GaveUp++
			rt.emit(ctx, Event{Kind: EventReconcileGaveUp, Operation: op, State: StateUnknown, Err: err})
			rt.cfg.logger.ErrorContext(ctx, "idem: giving up reconciling: the answer of the record's last attempt could not be written; it stays UNKNOWN and needs a human",
				"operation", op, "key", rec.ID.Key, "scope", rec.ID.Scope, "attempts", rec.Attempts, "outcome", outcome, "err", err)
		}
		return st, err
	}
	switch {
	case release:
		st.Released++
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op})
		rt.cfg.logger.InfoContext(ctx, "idem: reconciled: the effect did not happen; record released",
			"operation", op, "key", rec.ID.Key, "scope", rec.ID.Scope)
	case tp.To == StateUnknown && rec.Attempts >= r.cfg.maxAttempts:
		st.GaveUp++
		rt.emit(ctx, Event{Kind: EventReconcileGaveUp, Operation: op, State: StateUnknown, Err: qerr})
		rt.cfg.logger.ErrorContext(ctx, "idem: giving up reconciling: the record stays UNKNOWN and needs a human",
			"operation", op, "key", rec.ID.Key, "scope", rec.ID.Scope, "attempts", rec.Attempts, "err", qerr)
	case tp.To == StateUnknown:
		st.StillUnknown++
		rt.emit(ctx, Event{Kind: EventUnknown, Operation: op, State: StateUnknown, Err: qerr})
		rt.cfg.logger.InfoContext(ctx, "idem: reconcile: the query cannot tell yet; will retry",
			"operation", op, "key", rec.ID.Key, "attempts", rec.Attempts, "retry_in", tp.Lease, "err", qerr)
	default:
		if tp.To == StateSuccess {
			st.Succeeded++
		} else {
			st.Failed++
		}
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op, State: tp.To})
		rt.cfg.logger.InfoContext(ctx, "idem: reconciled", "operation", op, "key", rec.ID.Key,
			"scope", rec.ID.Scope, "state", string(tp.To))
	}
	return st, nil
}

// resolveNoQuery converges a record of an operation registered with
// [RegisterNoQuery]: it holds the record UNKNOWN until the policy's delay
// after its claim has passed, then releases it or records FAILED.
func (r *Reconciler) resolveNoQuery(ctx context.Context, rec Record, q registeredQuery) (ReconcileStats, error) {
	st := ReconcileStats{Acquired: 1}
	rt, op := r.rt, rec.ID.Operation
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.completionTimeout)
	defer cancel()
	due := rec.CreatedAt.Add(q.noQueryAfter)
	if wait := due.Sub(rec.StoreNow); wait > 0 {
		_, err := rt.transitionStore(cctx, &TransitionParams{ID: rec.ID, From: StateUnknown, Owner: r.cfg.owner, Version: rec.Version,
			To: StateUnknown, Lease: max(wait, 10*time.Millisecond), Token: rt.newToken(),
			Note: "outcome unknown; the operation has no query: resolved by policy at " + due.UTC().Format(time.RFC3339Nano)})
		if errors.Is(err, ErrLeaseLost) {
			st.LeaseLost++
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("idem: reconciler: %s %q: holding the record: %w", op, rec.ID.Key, err)
		}
		st.StillUnknown++
		return st, nil
	}
	var err error
	if q.opts.NotHappened == NotHappenedFail {
		ttl := q.opts.TTL
		if ttl <= 0 {
			ttl = rt.cfg.ttl
		}
		msg := fmt.Sprintf("the outcome is unknown and %s has no query: recorded as failed by its policy after %v", op, q.noQueryAfter)
		_, err = rt.transitionStore(cctx, &TransitionParams{ID: rec.ID, From: StateUnknown, Owner: r.cfg.owner, Version: rec.Version,
			To: StateFailed, TTL: ttl, Response: EncodeFailure(errors.New(msg)), Token: rt.newToken(), Note: "resolved by no-query policy: failed"})
	} else {
		err = rt.store.Release(cctx, ReleaseParams{ID: rec.ID, State: StateUnknown, Owner: r.cfg.owner, Version: rec.Version})
	}
	if errors.Is(err, ErrLeaseLost) {
		st.LeaseLost++
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("idem: reconciler: %s %q: resolving by policy: %w", op, rec.ID.Key, err)
	}
	if q.opts.NotHappened == NotHappenedFail {
		st.Failed++
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op, State: StateFailed})
	} else {
		st.Released++
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op})
	}
	rt.cfg.logger.WarnContext(ctx, "idem: resolved an unknown outcome by the operation's no-query policy (the effect may have happened)",
		"operation", op, "key", rec.ID.Key, "scope", rec.ID.Scope, "released", q.opts.NotHappened != NotHappenedFail)
	return st, nil
}

// backoff is the hold-off after the given number of attempts: exponential,
// capped, with full jitter (at least 10ms).
func (r *Reconciler) backoff(attempts int32) time.Duration {
	d := r.cfg.baseBackoff
	for i := int32(1); i < attempts && d < r.cfg.maxBackoff; i++ {
		if d > r.cfg.maxBackoff/2 { // doubling would pass the maximum, or overflow
			d = r.cfg.maxBackoff
			break
		}
		d *= 2
	}
	d = min(d, r.cfg.maxBackoff)
	// float64(d) may round up past the largest Duration: a product that
	// does not convert back is d itself.
	j := time.Duration(r.cfg.rand() * float64(d))
	if j < 0 || j > d {
		j = d
	}
	return max(j, 10*time.Millisecond)
}

// askQuery runs a registered query on a goroutine of its own and waits for
// its answer until ctx's deadline and a grace after it. A query is code of
// the caller's: one that calls runtime.Goexit, or ignores its context and
// hangs, answers OutcomeUnknown (an inconclusive attempt, given up on and
// reported at ReconcileMaxAttempts like any other) instead of ending the
// reconciler's pass, or holding the rest of its batch, acquired and
// unqueried, past their lease. A hung query's goroutine is left to end
// when it returns; its answer is dropped.
func askQuery(ctx context.Context, q registeredQuery, request []byte, grace time.Duration) (resp []byte, short responseCutter, o Outcome, err error) {
	type answer struct {
		resp  []byte
		short responseCutter
		o     Outcome
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				done <- answer{o: OutcomeUnknown, err: errQueryExited}
			}
		}()
		var a answer
		a.resp, a.short, a.o, a.err = runRegisteredQuery(ctx, q, request)
		returned = true
		done <- a
	}()
	select {
	case a := <-done:
		return a.resp, a.short, a.o, a.err
	case <-ctx.Done():
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case a := <-done:
		return a.resp, a.short, a.o, a.err
	case <-timer.C:
		return nil, nil, OutcomeUnknown, fmt.Errorf("%w: no answer %v after its context ended (%v)", errQueryHung, grace, context.Cause(ctx))
	}
}

// queryGrace is how long the reconciler waits for a query's answer after
// the query's context ended (a query that honours its context answers
// within it): at most a quarter of the reconcile lease.
const queryGrace = 100 * time.Millisecond

func (r *Reconciler) grace() time.Duration { return min(queryGrace, r.cfg.lease/4) }

var (
	errQueryExited = errors.New("idem: reconciler: the query did not return (runtime.Goexit)")
	errQueryHung   = errors.New("idem: reconciler: the query ignored its context")
	// errConvergenceExited: code of the caller's called runtime.Goexit
	// before the record's answer was written.
	errConvergenceExited = errors.New("idem: reconciler: the record's convergence did not return (runtime.Goexit in code of the caller's)")
)

func runRegisteredQuery(ctx context.Context, q registeredQuery, request []byte) (resp []byte, short responseCutter, o Outcome, err error) {
	returned := false
	defer func() {
		if !returned {
			v := recover() // nil: panic(nil) under GODEBUG=panicnil=1
			resp, short, o, err = nil, nil, OutcomeUnknown, &PanicError{Value: v, Stack: debug.Stack(), of: "query"}
		}
	}()
	resp, short, o, err = q.run(ctx, request)
	returned = true
	return resp, short, o, errtree.Acyclic(err)
}

func ignoreLeaseLost(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}

func (rt *Runtime) query(operation string) (registeredQuery, bool) {
	rt.mu.RLock()
	q, ok := rt.queries[operation]
	rt.mu.RUnlock()
	return q, ok
}
