package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/runtime/internal/errtree"
)

// Call is one idempotent call: the effect of Request, identified by
// (scope from the context, Operation, Key).
type Call[Req, Resp any] struct {
	// Operation names what the key is for, "Service.Method" by convention.
	Operation string
	// Key is the client's idempotency key: 1 to 255 bytes of visible ASCII.
	Key string
	// Scope, optional, is the scope of the key in place of the context's
	// ([ScopeFrom]): Do then runs as if called with [WithScope](ctx, Scope),
	// without making that context unless an observer or a logger set with
	// [WithObserver] or [WithLogger] is to get it. The effect's and the
	// query's contexts carry it.
	Scope string
	// Request is encoded with the runtime's codec and stored so that a
	// reconciler can query the downstream about it. Unless Fingerprint is
	// set, the fingerprint covers the whole request: with the default
	// codec it is the SHA-256 of the encoding when the encoding tells
	// every two requests that differ apart, else (unexported fields,
	// fields tagged `json:"-"`, an embedded struct's field another one
	// shadows, what omitempty or omitzero leave out for values that
	// differ, a nil pointer beside a pointer to a nil, strings with
	// invalid UTF-8) the SHA-256 of a canonical encoding of every part of
	// the request, each field by its Go value (floats by their bits), each
	// value json encodes by its own MarshalJSON or MarshalText by that
	// method's output as json writes it, and each value in an interface
	// whose JSON tells it apart by that JSON. The stored request still leaves
	// out what JSON leaves out (a card number tagged `json:"-"` is compared,
	// never stored). A part no encoding can compare (a func, a chan, a
	// cycle of pointers, where json does not reach) makes Do fail before
	// any claim with [ErrNotComparable], naming the field: set Fingerprint
	// for such a type. With
	// another Codec, the fingerprint is the SHA-256 of its encoding, which
	// must then hold the whole request.
	Request Req
	// Effect does the work. It runs at most once per identity while
	// outcomes are recorded; it must honour ctx, which carries the
	// [Attempt] (fencing token, downstream key) and is cancelled with cause
	// [ErrLeaseLost] when the lease is lost.
	Effect func(ctx context.Context, req Req) (Resp, error)
	// Query, optional, tells whether the effect of req happened. With it
	// UNKNOWN records and expired leases are converged instead of reported
	// or re-executed.
	Query QueryFunc[Req, Resp]
	// Fingerprint, optional, overrides the fingerprint (for example a hash
	// of chosen fields: see [Runtime.FingerprintOf]). Same key with
	// another fingerprint is ErrKeyReused.
	Fingerprint []byte
	// Lease and TTL, optional, override the runtime's defaults.
	Lease time.Duration
	TTL   time.Duration
}

// Do runs c exactly once per identity and returns its response, or replays
// the recorded outcome of an earlier call with the same identity.
//
// Errors: [ErrInvalidKey] for a bad key; [ErrKeyReused] when the key was used
// with another request; [ErrInProgress] when a call with the same identity is
// still running after MaxWait; [ErrOutcomeUnknown] when an earlier attempt's
// outcome is unknown (and, wrapped with the cause, when this attempt timed
// out); [ErrLeaseLost] when this call's lease was taken over, or when the
// lease rule stopped the effect and it returned an error of its own (the
// claim is then released; the effect's error is wrapped too); a
// [*FailedError] replaying a permanent failure; the effect's own error
// otherwise. Store errors are returned wrapped.
func Do[Req, Resp any](ctx context.Context, rt *Runtime, c Call[Req, Resp]) (Resp, error) {
	return do(ctx, rt, c, nil)
}

// do is the protocol, the one every door drives: [Do], [DoLocal] (with
// local set), the adapters and generated wrappers.
func do[Req, Resp any](ctx context.Context, rt *Runtime, c Call[Req, Resp], local Local) (Resp, error) {
	var zero Resp
	switch {
	case rt == nil:
		return zero, fmt.Errorf("idem: %s: runtime is nil", c.Operation)
	case c.Effect == nil:
		return zero, fmt.Errorf("idem: %s: call has no effect", c.Operation)
	case c.Lease < 0 || (c.Lease > 0 && c.Lease < 10*time.Millisecond):
		return zero, fmt.Errorf("idem: %s: lease must be at least 10ms, got %v", c.Operation, c.Lease)
	case c.TTL < 0 || (c.TTL > 0 && c.TTL < minTTL):
		return zero, fmt.Errorf("idem: %s: TTL must be at least %v, got %v", c.Operation, minTTL, c.TTL)
	}
	if c.Scope != "" && (rt.cfg.observer != nil || rt.cfg.loggerSet) && ScopeFrom(ctx) != c.Scope {
		ctx = WithScope(ctx, c.Scope)
	}
	id := Identity{Scope: c.Scope, Operation: c.Operation, Key: c.Key}
	if id.Scope == "" {
		id.Scope = ScopeFrom(ctx)
	}
	if err := validateIdentity(id); err != nil {
		return zero, err
	}
	lease, ttl := c.Lease, c.TTL
	if lease <= 0 {
		lease = rt.cfg.lease
	}
	if ttl <= 0 {
		ttl = rt.cfg.ttl
	}
	// One allocation carries the call (a replay decodes into it), and one
	// more what a claim runs with.
	ex := &execution[Req, Resp]{rt: rt, c: c, id: id, lease: lease, ttl: ttl, local: local}
	fp, reqBytes, err := encodeRequest(rt, &ex.c.Request, c.Fingerprint)
	if err != nil {
		return zero, fmt.Errorf("idem: %s: encoding request: %w", c.Operation, err)
	}
	claim := ClaimParams{
		ID: id, Fingerprint: fp, Request: reqBytes, Owner: rt.cfg.owner,
		Lease: lease, AcquireUnknown: c.Query != nil,
	}

	var waitStart, waitUntil time.Time // set on the first wait
	backoff := 5 * time.Millisecond
	askedLocal := local == nil // a LocalReader is asked once (see there)
	for claims := 1; ; claims++ {
		if claims > 1000 { // a store bug, not a state: never spin forever
			return zero, fmt.Errorf("idem: %s %q: the store neither grants nor refuses the claim (%d tries)", id.Operation, id.Key, claims-1)
		}
		start := time.Now()
		res, err := claimOnce(ctx, rt, claim, local != nil)
		if err == nil && res.Claimed && res.Record.ID == id {
			return ex.runClaimed(ctx, res.Record, start, waitStart, !waitUntil.IsZero())
		}
		rt.phase(ctx, id.Operation, PhaseClaim, start)
		if !askedLocal && (errors.Is(err, ErrInProgress) || (err == nil && !res.Claimed && !res.Record.State.Final())) {
			// In flight, perhaps in the local call's own transaction,
			// which then holds the outcome: replayed below if so.
			askedLocal = true
			own, answer, lerr := askLocal(ctx, local, id)
			if lerr != nil {
				return zero, lerr
			}
			switch answer {
			case localReplay:
				res, err = ClaimResult{Record: own.Record}, nil
			case localReentrant:
				if !bytes.Equal(own.Fingerprint, fp) {
					res, err = ClaimResult{Record: own.Record}, nil // ErrKeyReused, below
					break
				}
				err := fmt.Errorf("%w: %s %q: called from inside the effect of the call in flight, this transaction's own", ErrInProgress, id.Operation, id.Key)
				rt.emit(ctx, Event{Kind: EventInProgress, Operation: id.Operation, State: StateProcessing, Err: err})
				return zero, err
			case localAbandoned:
				if !bytes.Equal(own.Fingerprint, fp) {
					// Another request with the key: the key stays bound to
					// the first request, as for a void claim of a
					// transaction that ended (ErrKeyReused, below).
					res, err = ClaimResult{Record: own.Record}, nil
					break
				}
				// The transaction's own claim, whose call returned and
				// whose outcome the transaction no longer holds: nothing
				// of that call can commit. Released by compare-and-set
				// (another worker may have taken it over meanwhile), then
				// claimed again.
				if err := releaseAbandoned(ctx, rt, own.Record); err != nil {
					return zero, err
				}
				rt.cfg.logger.InfoContext(ctx, "idem: released a claim of this transaction whose outcome it no longer holds",
					"operation", id.Operation, "key", id.Key, "version", own.Version)
				continue
			}
		}
		if errors.Is(err, ErrInProgress) {
			// The store saw the call in flight but could not read its
			// lease (a row another transaction holds): wait as for a live
			// lease, up to MaxWait, then claim again. MaxWait counts from
			// this claim's start: the store's own tries before it gave up
			// (pgstore: ten tries, under a second) are part of the wait.
			if waitUntil.IsZero() {
				waitStart = start
				waitUntil = waitStart.Add(rt.cfg.maxWait)
			}
			if left := time.Until(waitUntil); left > 0 {
				if err := sleepCtx(ctx, min(backoff, left)); err != nil {
					return zero, fmt.Errorf("idem: %s %q: waiting for the call in flight: %w", id.Operation, id.Key, err)
				}
				backoff = min(backoff*2, 250*time.Millisecond)
				continue
			}
			rt.phase(ctx, id.Operation, PhaseWait, waitStart)
			err = fmt.Errorf("idem: %s %q: %w", id.Operation, id.Key, err)
			rt.emit(ctx, Event{Kind: EventInProgress, Operation: id.Operation, State: StateProcessing, Err: err})
			return zero, err
		}
		if err != nil {
			return zero, fmt.Errorf("idem: %s %q: claim: %w", id.Operation, id.Key, err)
		}
		if res.Record.ID != id {
			// Never answer one caller with another identity's record.
			return zero, fmt.Errorf("idem: %s %q: claim: the store returned the record of %s", id.Operation, id.Key, idText(res.Record.ID))
		}
		rec := res.Record
		for {
			if rec.State.Final() || !bytes.Equal(rec.Fingerprint, fp) || (rec.State == StateUnknown && (c.Query == nil || rec.Owner == "")) {
				err := replayInto(rt, rec, fp, &ex.resp)
				resp := ex.resp
				switch {
				case errors.Is(err, ErrKeyReused):
					rt.emit(ctx, Event{Kind: EventKeyReused, Operation: id.Operation, State: rec.State, Err: err})
				case rec.State == StateUnknown:
					rt.emit(ctx, Event{Kind: EventUnknown, Operation: id.Operation, State: rec.State, Err: err})
				default:
					rt.emit(ctx, Event{Kind: EventReplayed, Operation: id.Operation, State: rec.State})
				}
				return resp, err
			}
			if !rec.LeaseLive() {
				break // expired, or free for reconciliation: claim again
			}
			if waitUntil.IsZero() {
				waitStart = start // as above: from the claim that saw it
				waitUntil = waitStart.Add(rt.cfg.maxWait)
			}
			left := time.Until(waitUntil)
			if left <= 0 {
				rt.phase(ctx, id.Operation, PhaseWait, waitStart)
				if rec.State == StateUnknown {
					err := fmt.Errorf("%w: %s %q is being reconciled", ErrOutcomeUnknown, id.Operation, id.Key)
					rt.emit(ctx, Event{Kind: EventUnknown, Operation: id.Operation, State: rec.State, Err: err})
					return zero, err
				}
				err := fmt.Errorf("%w: %s %q (lease held by another worker for %v more)",
					ErrInProgress, id.Operation, id.Key, rec.LeaseExpiresAt.Sub(rec.StoreNow).Round(time.Millisecond))
				rt.emit(ctx, Event{Kind: EventInProgress, Operation: id.Operation, State: rec.State, Err: err})
				return zero, err
			}
			sleep := min(backoff, left, rec.LeaseExpiresAt.Sub(rec.StoreNow)+time.Millisecond)
			backoff = min(backoff*2, 250*time.Millisecond)
			if err := sleepCtx(ctx, sleep); err != nil {
				return zero, fmt.Errorf("idem: %s %q: waiting for the call in flight: %w", id.Operation, id.Key, err)
			}
			rec, err = rt.store.Get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				break // released: claim again
			}
			if err != nil {
				return zero, fmt.Errorf("idem: %s %q: get: %w", id.Operation, id.Key, err)
			}
			if rec.ID != id {
				return zero, fmt.Errorf("idem: %s %q: get: the store returned the record of %s", id.Operation, id.Key, idText(rec.ID))
			}
		}
	}
}

// runClaimed runs a call whose claim the store granted at start: rec is
// the record it holds. Code of the caller's runs before the effect's own
// way out is set (observers on the claim, the logger, an inline query, a
// Local's Begin): a call that leaves there (runtime.Goexit) gives what it
// holds back on its way out (see [execution.leaveHeld]), so that no gone
// call holds a record with a live lease.
func (ex *execution[Req, Resp]) runClaimed(ctx context.Context, rec Record, start, waitStart time.Time, waited bool) (resp Resp, err error) {
	rt, id := ex.rt, ex.id
	ex.granted = start
	ex.created = rec.CreatedAt
	if ex.run == nil {
		ex.run = new(running)
	}
	// An UNKNOWN record, or one taken over, may have been acted on by an
	// earlier attempt, unless the attempt was a local call's (its writes
	// are undone unless its outcome is recorded).
	ex.hold = holding{version: rec.Version, unknown: rec.State == StateUnknown, note: rec.Note,
		earlier: ex.local == nil && (rec.State == StateUnknown || rec.Takeovers > 0)}
	returned := false
	defer func() {
		if !returned && !ex.hold.owned {
			ex.leaveHeld(ctx)
		}
	}()
	rt.phase(ctx, id.Operation, PhaseClaim, start)
	if waited {
		rt.phase(ctx, id.Operation, PhaseWait, waitStart)
	}
	switch {
	case rec.State == StateUnknown:
		resp, err = ex.reconcileInline(ctx, rec)
	case rec.Takeovers > 0:
		rt.emit(ctx, Event{Kind: EventTakeover, Operation: id.Operation, State: StateProcessing})
		rt.cfg.logger.InfoContext(ctx, "idem: took over an expired lease",
			"operation", id.Operation, "key", id.Key, "version", rec.Version, "query", ex.c.Query != nil)
		if ex.c.Query != nil {
			resp, err = ex.reconcileInline(ctx, rec)
		} else {
			resp, err = ex.execute(ctx, rec)
		}
	default:
		rt.emit(ctx, Event{Kind: EventClaimed, Operation: id.Operation, State: StateProcessing})
		resp, err = ex.execute(ctx, rec)
	}
	returned = true
	return resp, err
}

// leaveHeld gives back what a claimed call holds when it leaves before the
// effect's own way out was set (see [execution.runClaimed]): its renewals
// stop; an UNKNOWN record goes back to UNKNOWN with no lease (a duplicate
// or the reconciler asks again), a record an earlier attempt may have
// acted on is recorded UNKNOWN, and a claim whose effect has not run is
// released. Each by compare-and-set on the version held.
func (ex *execution[Req, Resp]) leaveHeld(ctx context.Context) {
	run, h := ex.run, ex.hold
	if run.hb.eff != nil { // started
		run.hb.completing.Store(true)
		run.hb.stop()
	}
	from := StateProcessing
	if h.unknown {
		from = StateUnknown
	}
	tp := &run.tp
	*tp = TransitionParams{ID: ex.id, From: from, Owner: ex.rt.cfg.owner, Version: h.version}
	release, what := false, "released its claim (the effect had not run)"
	switch {
	case h.unknown || h.earlier:
		// (earlier: even once a query has said the effect did not
		// happen; the next call takes the record over and asks again:
		// review r59.)
		tp.To, tp.Token = StateUnknown, ex.rt.newToken()
		if h.unknown {
			tp.Note = h.note
		}
		what = "recorded UNKNOWN (an earlier attempt may have acted)"
	default:
		release = true
	}
	if _, err := ex.complete(ctx, release, tp); err != nil {
		ex.rt.cfg.logger.ErrorContext(ctx, "idem: the call ended (a panic or runtime.Goexit) before its effect ran, and giving its claim back failed",
			"operation", ex.id.Operation, "key", ex.id.Key, "err", err)
		return
	}
	ex.rt.cfg.logger.ErrorContext(ctx, "idem: the call ended (a panic or runtime.Goexit) before its effect ran; "+what,
		"operation", ex.id.Operation, "key", ex.id.Key)
}

// releaseAbandoned releases rec, a claim of a local call's own transaction
// whose call returned, on a context the caller cannot cancel (as a local
// claim runs; [Runtime.RetryWrite]). A claim another worker took over
// meanwhile is left as it is.
func releaseAbandoned(ctx context.Context, rt *Runtime, rec Record) error {
	err := rt.RetryWrite(ctx, func(wctx context.Context) error {
		return rt.store.Release(wctx, ReleaseParams{ID: rec.ID, State: StateProcessing, Owner: rec.Owner, Version: rec.Version})
	})
	if err != nil && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("idem: %s %q: releasing this transaction's earlier claim (version %d): %w", rec.ID.Operation, rec.ID.Key, rec.Version, err)
	}
	return nil
}

// claimOnce runs one claim. A local call's claim runs on a context the
// caller cannot cancel, bounded by the completion timeout: a claim applied
// whose reply a cancellation cut would hold the key for its whole lease,
// naming no transaction that could free it; run to its end, the claim is
// released at once when the caller is gone (see execute).
func claimOnce(ctx context.Context, rt *Runtime, p ClaimParams, local bool) (ClaimResult, error) {
	if !local {
		return rt.store.Claim(ctx, p)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.completionTimeout)
	defer cancel()
	return rt.store.Claim(cctx, p)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// execution carries one call through its states.
type execution[Req, Resp any] struct {
	rt    *Runtime
	c     Call[Req, Resp]
	id    Identity
	lease time.Duration
	ttl   time.Duration
	// granted is when (local clock) the write that granted the lease held
	// now was sent: see the lease rule.
	granted time.Time
	// created is the held record's CreatedAt: the life of it a release
	// deletes (see [releaseApplied]).
	created time.Time
	// local, when set, runs the effect in its own transaction: see
	// [DoLocal].
	local Local

	// resp is the response: decoded by a replay, encoded by a completion.
	resp Resp
	// run is what a claim runs with; nil for a replay.
	run *running
	// hold is what a claimed call holds (see runClaimed).
	hold holding
}

// running is what a claimed call runs with, in one allocation: eff is the
// effect's context, hb its lease's heartbeat, tp its outcome, cctx the
// context its first completion writes with (its parent is nil until then).
// At 632 bytes it fits, with the header the allocator adds to an object
// with pointers above 512 bytes, in the 640-byte size class.
type running struct {
	eff  effectCtx
	hb   heartbeat
	tp   TransitionParams
	cctx completionCtx
}

// holding is what a claimed call holds until the effect's way out is set
// (owned): the record's version, UNKNOWN or PROCESSING, and whether an
// earlier attempt may have acted on it. See [execution.runClaimed].
type holding struct {
	version int64
	unknown bool
	owned   bool
	// earlier: the record was UNKNOWN or taken over when claimed (an
	// earlier attempt, not a local call's, may have acted), whatever a
	// query has said since. A call that leaves, or whose caller goes,
	// before its effect records such a record UNKNOWN, and a late start
	// not confirmed leaves it to its lease, so that the next call takes it
	// over and asks the query again (an earlier attempt still on its way
	// to the downstream may have landed by then).
	earlier bool
	// note is the held record's: an UNKNOWN record written back UNKNOWN
	// keeps it (a record the reconciler gave up on stays marked).
	note string
}

// execute runs the effect on a PROCESSING record held by this owner and
// records its outcome.
func (ex *execution[Req, Resp]) execute(ctx context.Context, rec Record) (Resp, error) {
	var zero Resp
	if cerr := context.Cause(ctx); cerr != nil {
		// The caller went away before the effect started: nothing of this
		// call's happened, so a fresh claim is released rather than left
		// UNKNOWN. A record an earlier attempt may have acted on (taken
		// over, or UNKNOWN, even once a query has said the effect did
		// not happen) is recorded UNKNOWN, as a call that leaves records
		// it: the next call asks again (review r59).
		ex.run.tp = TransitionParams{ID: ex.id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version}
		release := !ex.hold.earlier
		if !release {
			ex.run.tp.To, ex.run.tp.Token = StateUnknown, ex.rt.newToken()
		}
		_, rerr := ex.complete(ctx, release, &ex.run.tp)
		if release {
			ex.rt.emit(ctx, Event{Kind: EventReleased, Operation: ex.id.Operation, Err: cerr})
		} else {
			ex.rt.emit(ctx, Event{Kind: EventUnknown, Operation: ex.id.Operation, State: StateUnknown, Err: cerr})
		}
		return zero, errors.Join(fmt.Errorf("idem: %s %q: the caller's context ended before the effect ran: %w", ex.id.Operation, ex.id.Key, cerr), rerr)
	}
	if err := ex.confirmLateStart(ctx, rec); err != nil {
		return zero, err
	}
	effCtx := &ex.run.eff
	effCtx.init(ctx, ex.rt, ex.id, rec.Version, rec.Takeovers > 0, ex.c.Scope)
	defer effCtx.release()
	// The lease is renewed until the outcome is recorded: a completion that
	// retries through a store outage must not lose the record to a takeover.
	hb := &ex.run.hb
	ex.startHeartbeat(hb, ctx, rec, ex.granted, true, effCtx)
	if ex.local != nil {
		return ex.executeLocal(ctx, rec, effCtx, hb)
	}
	// A call that leaves before its outcome is recorded (runtime.Goexit in
	// the effect, a panic in code of the caller's that the runtime calls
	// after it: a logger) stops its renewals and records UNKNOWN, as for
	// an effect that panicked, on its way out.
	recorded := false
	ex.hold.owned = true
	defer func() {
		if !recorded {
			ex.abandon(ctx, rec, hb)
		}
	}()
	start := ex.rt.phaseStart()
	panicked, err := ex.runEffect(effCtx)
	resp := ex.resp
	ex.rt.phase(ctx, ex.id.Operation, PhaseEffect, start)
	hb.completing.Store(true)

	// A lease this worker stopped its effect for, unconfirmed, was not
	// taken over (yet): the outcome is recorded as UNKNOWN like any
	// cancellation, by compare-and-set.
	// The lease is judged by the cause the runtime stopped the effect
	// with, not the context's, which a caller's context can carry in (an
	// outer call's lost lease).
	cause := effCtx.stopCause()
	leaseLost := cause != nil && errors.Is(cause, ErrLeaseLost) && !isUnconfirmed(cause)
	to := ex.classify(err, panicked != nil)
	ex.run.tp = TransitionParams{ID: ex.id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version, To: to}
	tp := &ex.run.tp
	if to != "" {
		tp.Token = ex.rt.newToken()
	}
	switch to {
	case StateSuccess:
		tp.TTL = ex.ttl
		if b, merr := encodeResponse(ex.rt, &ex.resp); merr != nil {
			// The effect happened but its response cannot be encoded: record
			// that it happened, without a response to replay.
			tp.ResponseOmitted, tp.Note = true, "response not stored: encoding it failed: "+errorText(merr)
		} else {
			tp.Response = b
		}
	case StateFailed:
		tp.Response, tp.TTL = EncodeFailure(err), ex.ttl
	}
	var cerr error
	start = ex.rt.phaseStart()
	_, cerr = ex.complete(ctx, to == "", tp)
	recorded = true
	hb.stop()
	ex.rt.phase(ctx, ex.id.Operation, PhaseComplete, start)
	ex.observeOutcome(ctx, tp.To, err, cerr, leaseLost)
	if panicked != nil && !ex.rt.cfg.recoverPanics {
		panic(panicked.Value)
	}
	if cerr != nil {
		if errors.Is(cerr, ErrLeaseLost) || leaseLost {
			// The other owner decides the outcome: the effect's own error is
			// quoted, not wrapped, so that a permanent failure of this
			// attempt is never read as the outcome of the call.
			return zero, fmt.Errorf("%w: %s %q: another worker took over (version %d) before this attempt finished (this attempt: %v)",
				ErrLeaseLost, ex.id.Operation, ex.id.Key, rec.Version, errors.Join(err, cerr))
		}
		switch tp.To {
		case StateSuccess:
			return resp, fmt.Errorf("%w: %s %q: the effect succeeded but its outcome was not recorded: %w", ErrNotRecorded, ex.id.Operation, ex.id.Key, cerr)
		case StateFailed:
			// Quoted, not wrapped: the record stays PROCESSING until its
			// lease expires, and a duplicate then runs the effect again
			// (or asks the query), so the failure is not the call's
			// outcome: a caller told it could give up on the key while a
			// duplicate's effect succeeds.
			return zero, fmt.Errorf("idem: %s %q: the effect failed permanently (%v) but recording it failed; the claim stays until its lease expires: %w",
				ex.id.Operation, ex.id.Key, err, cerr)
		case StateUnknown:
			// Quoted too: a timeout marked permanent is UNKNOWN, and must
			// not read as a failure.
			attempt := err
			if panicked != nil {
				attempt = panicked
			}
			return zero, fmt.Errorf("%w: %s %q: %v; recording UNKNOWN failed; the claim stays until its lease expires: %w",
				ErrOutcomeUnknown, ex.id.Operation, ex.id.Key, attempt, cerr)
		}
		return zero, fmt.Errorf("idem: %s %q: releasing the claim: %w", ex.id.Operation, ex.id.Key, errors.Join(notPermanent(err), cerr))
	}
	switch tp.To {
	case StateSuccess:
		if tp.ResponseOmitted {
			ex.rt.cfg.logger.WarnContext(ctx, "idem: the effect succeeded but its response was not stored; duplicates get ErrNotReplayable",
				"operation", ex.id.Operation, "key", ex.id.Key, "note", tp.Note)
		}
		return resp, nil
	case StateUnknown:
		// The effect's error stays in the tree (a timeout matches), but
		// not as a permanent failure: UNKNOWN is not final.
		if panicked != nil {
			return zero, fmt.Errorf("%w: %w", ErrOutcomeUnknown, notPermanent(panicked))
		}
		return zero, fmt.Errorf("%w: %s %q: %w", ErrOutcomeUnknown, ex.id.Operation, ex.id.Key, notPermanent(err))
	case StateFailed:
		return zero, err
	}
	// Released: the next call runs the effect again, so a Permanent under
	// the Retryable that decided is not the call's outcome either.
	if err != nil && cause != nil && errors.Is(cause, ErrLeaseLost) && !errorIs(err, ErrLeaseLost) {
		// The lease rule stopped the effect, which returned its own error
		// (a statement cancelled on the server, "canceling statement due
		// to user request"), not the context's: the caller learns why.
		return zero, fmt.Errorf("%w; the claim was released (the effect returned: %w)", cause, notPermanent(err))
	}
	return zero, notPermanent(err)
}

// abandon ends a call that is leaving before its outcome was recorded: its
// renewals stop, and the outcome is UNKNOWN (the effect may have run), by
// compare-and-set, so that a query or a person converges it.
func (ex *execution[Req, Resp]) abandon(ctx context.Context, rec Record, hb *heartbeat) {
	hb.completing.Store(true)
	hb.stop()
	tp := &ex.run.tp
	if ex.run.eff.a.flags.Load()&attemptLeave != 0 {
		// An adapter's request another placement claimed in its own store
		// (ReleaseOnLeave): this claim is released, as on return.
		*tp = TransitionParams{ID: ex.id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version}
		if _, cerr := ex.complete(ctx, true, tp); cerr != nil {
			ex.rt.cfg.logger.ErrorContext(ctx, "idem: the call ended (runtime.Goexit) before its effect returned, and releasing its claim (another placement holds the request) failed",
				"operation", ex.id.Operation, "key", ex.id.Key, "err", cerr)
		}
		return
	}
	*tp = TransitionParams{ID: ex.id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version,
		To: StateUnknown, Token: ex.rt.newToken()}
	if _, cerr := ex.complete(ctx, false, tp); cerr != nil {
		ex.rt.cfg.logger.ErrorContext(ctx, "idem: the call ended (a panic or runtime.Goexit) before its outcome was recorded, and recording UNKNOWN failed",
			"operation", ex.id.Operation, "key", ex.id.Key, "err", cerr)
		return
	}
	ex.rt.cfg.logger.ErrorContext(ctx, "idem: the call ended (a panic or runtime.Goexit) before its outcome was recorded; recorded UNKNOWN",
		"operation", ex.id.Operation, "key", ex.id.Key)
}

// confirmLateStart renews the lease before the effect starts when the
// write that granted it was sent so long ago (a slow reply, a retried
// compare-and-set, a paused process) that the lease may have expired and
// another worker taken the record over: the effect must not start beside
// that worker's. A renewal's compare-and-set succeeds only if no one took
// over. When the lease cannot be confirmed, nothing has run: the call fails
// and gives a fresh claim back (a release, by compare-and-set on its
// version: a takeover since is kept), so that a retry claims at once
// instead of waiting out a lease no one works under (a DoTx caller's
// savepoint retry would wait on its own transaction's claim). A record an
// earlier attempt may have acted on (UNKNOWN, or taken over: hold.earlier,
// even once a query has said the effect did not happen) is left to its
// lease, as is a claim whose release fails too.
func (ex *execution[Req, Resp]) confirmLateStart(ctx context.Context, rec Record) error {
	if time.Since(ex.granted) < ex.lease-ex.lease/leaseMargin {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ex.lease/renewEvery)
	defer cancel()
	sent := time.Now()
	_, err := ex.rt.store.Renew(rctx, RenewParams{ID: ex.id, State: rec.State, Owner: ex.rt.cfg.owner, Version: rec.Version, Lease: ex.lease})
	switch {
	case errors.Is(err, ErrLeaseLost):
		ex.rt.emit(ctx, Event{Kind: EventLeaseLost, Operation: ex.id.Operation, State: rec.State, Err: err})
		return fmt.Errorf("%w: %s %q: the lease (version %d) expired before the effect could start and another worker took over; the effect did not run",
			ErrLeaseLost, ex.id.Operation, ex.id.Key, rec.Version)
	case err != nil:
		err = fmt.Errorf("idem: %s %q: the lease may have expired before the effect could start and renewing it failed; the effect did not run: %w",
			ex.id.Operation, ex.id.Key, err)
		if ex.hold.earlier {
			return err
		}
		ex.run.tp = TransitionParams{ID: ex.id, From: rec.State, Owner: ex.rt.cfg.owner, Version: rec.Version}
		if _, rerr := ex.complete(ctx, true, &ex.run.tp); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return errors.Join(err, fmt.Errorf("idem: %s %q: releasing the claim failed too; it is left to its lease: %w", ex.id.Operation, ex.id.Key, rerr))
		} else if rerr == nil {
			ex.rt.emit(ctx, Event{Kind: EventReleased, Operation: ex.id.Operation, Err: err})
		}
		return err
	}
	ex.granted = sent
	return nil
}

// observeOutcome reports the outcome of an attempt that ran the effect.
func (ex *execution[Req, Resp]) observeOutcome(ctx context.Context, to State, err, cerr error, leaseLost bool) {
	rt, op := ex.rt, ex.id.Operation
	switch {
	case errors.Is(cerr, ErrLeaseLost) || leaseLost:
		rt.emit(ctx, Event{Kind: EventLeaseLost, Operation: op, State: to, Err: errors.Join(err, cerr)})
		rt.cfg.logger.WarnContext(ctx, "idem: lease lost: another worker took over; this attempt's outcome was not recorded",
			"operation", op, "key", ex.id.Key, "outcome", string(to))
	case cerr != nil:
		rt.cfg.logger.ErrorContext(ctx, "idem: recording the outcome failed; the record stays PROCESSING until its lease expires",
			"operation", op, "key", ex.id.Key, "outcome", string(to), "err", cerr)
	case to == StateSuccess:
		rt.emit(ctx, Event{Kind: EventSucceeded, Operation: op, State: to})
	case to == StateFailed:
		rt.emit(ctx, Event{Kind: EventFailed, Operation: op, State: to, Err: err})
	case to == "":
		rt.emit(ctx, Event{Kind: EventReleased, Operation: op, Err: err})
	case to == StateUnknown:
		rt.emit(ctx, Event{Kind: EventUnknown, Operation: op, State: to, Err: err})
		if _, ok := rt.query(op); ok || ex.c.Query != nil {
			rt.cfg.logger.WarnContext(ctx, "idem: outcome unknown; the record waits for reconciliation",
				"operation", op, "key", ex.id.Key, "err", err)
		} else {
			rt.cfg.logger.ErrorContext(ctx, "idem: outcome unknown and the operation has no query nor no-query policy registered: "+
				"the record stays UNKNOWN until a person resolves it (idemctl)",
				"operation", op, "key", ex.id.Key, "scope", ex.id.Scope, "err", err)
		}
	}
}

// classify maps the effect's result to the state to record; "" releases.
// A panic is UNKNOWN; everything else is [Runtime.Classify]'s decision.
func (ex *execution[Req, Resp]) classify(err error, panicked bool) (to State) {
	if panicked {
		return StateUnknown
	}
	// Classify calls the error's methods (Timeout, Is, GRPCStatus): code
	// of the caller's. One that panics leaves the outcome unknown.
	returned := false
	defer func() {
		if !returned {
			recover()
			to = StateUnknown
		}
	}()
	to = ex.rt.Classify(err)
	returned = true
	return to
}

// runEffect runs the effect, leaving its response in ex.resp.
//
// A panic is told by the effect not returning, not by recover's value:
// panic(nil) under GODEBUG=panicnil=1 (the default of a main module whose
// go.mod says go 1.20 or older) recovers as nil, and must not pass for a
// return (a SUCCESS with the zero response, in DoTx with half the writes).
func (ex *execution[Req, Resp]) runEffect(ctx context.Context) (p *PanicError, err error) {
	returned := false
	defer func() {
		if !returned {
			p = &PanicError{Value: recover(), Stack: debug.Stack()}
		}
	}()
	ex.resp, err = ex.c.Effect(ctx, ex.c.Request)
	returned = true
	return nil, errtree.Acyclic(err)
}

// The lease rule. A worker holds its lease from the moment it sent the
// write that granted it (a claim, a takeover, a compare-and-set): the store
// set the expiry from its own clock at or after that moment, so the lease
// lasts at least until then plus its length. The worker renews it every
// third of the lease ([renewEvery]); a renewal that fails or does not answer
// is retried at once with a short backoff, each attempt bounded by the time
// left. A worker whose store answers therefore keeps its lease, however
// slow one renewal is. When no renewal has been confirmed by [leaseMargin]
// before the lease could expire, the worker stops its effect: the effect's
// context is cancelled with [ErrLeaseLost] while the lease still holds, so
// that a duplicate that takes the record over afterwards never overlaps
// with it (for an effect that honours its context). A round that starts
// after that moment (the process itself was paused or starved) makes one
// quick renewal first: its compare-and-set succeeds only if no one took
// the record over meanwhile.
const (
	renewEvery  = 3  // renew every lease/renewEvery
	leaseMargin = 10 // stop the effect lease/leaseMargin before the lease could expire

	maxRenewalsInFlight = 3  // renewal attempts waiting for an answer at once
	maxRenewals         = 64 // renewal attempts in one round
)

// heartbeat renews the lease of one call until stop is called. Its rounds
// are scheduled by the runtime's [renewals].
type heartbeat struct {
	// ctx is the call's context: the renewals' values, and the logs'.
	ctx context.Context
	// id is the call's identity (its execution's, which outlives the
	// heartbeat).
	id      *Identity
	state   State
	version int64
	lease   time.Duration
	// eff, when stopUnconfirmed, is stopped with ErrLeaseLost when the
	// lease cannot be confirmed in time; it is always stopped when the
	// lease is lost.
	eff *effectCtx

	// completing is set once the effect returned: a renewal that finds the
	// lease gone then says nothing, since the completion reports it.
	completing atomic.Bool
	// stopped is set by stop; cancel, set by the first renewal round (a
	// call that ends before it allocates no context), cancels the
	// renewals, so that one in flight never holds up the end of a call.
	stopped atomic.Bool
	cancel  atomic.Pointer[context.CancelFunc]
	rctx    context.Context // the renewals' context; guarded by mu
	mu      sync.Mutex
	// confirmed is the local time the lease was last granted or renewed
	// from (the moment the confirmed write was sent); guarded by mu.
	confirmed time.Time

	// due and index are the round's place in the runtime's renewals,
	// guarded by its mutex; index is -1 when no round is scheduled.
	due   time.Time
	index int32

	stopUnconfirmed bool
}

// runtime is the runtime whose call the heartbeat renews the lease of (its
// effect's or query's context's: one pointer fewer in [running]).
func (h *heartbeat) runtime() *Runtime { return h.eff.a.rt }

// stop ends the renewals, waiting for one in progress (which it cancels).
func (h *heartbeat) stop() {
	h.stopped.Store(true)
	if c := h.cancel.Load(); c != nil {
		(*c)()
	}
	h.runtime().renewals.unschedule(h)
	h.mu.Lock()
	defer h.mu.Unlock()
}

// renewCtx returns the renewals' context, made on first use; nil once
// stopped. Call with h.mu held.
func (h *heartbeat) renewCtx() context.Context {
	if h.rctx == nil {
		ctx, cancel := context.WithCancel(context.WithoutCancel(h.ctx))
		h.rctx = ctx
		h.cancel.Store(&cancel)
	}
	if h.stopped.Load() {
		return nil
	}
	return h.rctx
}

func isUnconfirmed(err error) bool {
	var unconfirmed *errLeaseUnconfirmed
	return errors.As(err, &unconfirmed)
}

// errLeaseUnconfirmed is the cause an effect is cancelled with when its
// lease could not be confirmed in time.
type errLeaseUnconfirmed struct {
	id   Identity
	last error
}

func (e *errLeaseUnconfirmed) Error() string {
	last := "no renewal answered"
	if e.last != nil {
		last = "last renewal: " + errorText(e.last)
	}
	return fmt.Sprintf("%v: %s %q: the lease could not be renewed before it could expire (%s); the effect was stopped",
		ErrLeaseLost, e.id.Operation, e.id.Key, last)
}

func (e *errLeaseUnconfirmed) Unwrap() error { return ErrLeaseLost }

// startHeartbeat starts renewing the lease on rec, granted by a write sent
// at granted (local clock), by the lease rule above; when the lease is
// lost, or (with stopUnconfirmed) cannot be confirmed, while the effect
// runs it cancels eff with cause ErrLeaseLost. The first round is
// scheduled with the runtime's renewals: a call that ends before it is due
// pays for no timer and no goroutine.
func (ex *execution[Req, Resp]) startHeartbeat(h *heartbeat, ctx context.Context, rec Record, granted time.Time, stopUnconfirmed bool, eff *effectCtx) {
	*h = heartbeat{
		ctx: ctx, id: &ex.id, state: rec.State, version: rec.Version, lease: ex.lease,
		eff: eff, stopUnconfirmed: stopUnconfirmed, confirmed: granted, index: -1,
	}
	ex.rt.renewals.schedule(h, granted.Add(ex.lease/renewEvery))
}

func (h *heartbeat) stopEffect(cause error) {
	if !h.completing.Load() {
		h.eff.cancelCause(cause)
	}
}

// round runs one renewal round: an attempt, another one every hedge while
// none has answered (a renewal stuck on a dead connection must not keep a
// live store from confirming the lease), and a retry after each quick
// failure, all bounded by the last moment the lease is known to hold.
//
// The round logs what happened only once it has done what the lease rule
// needs (confirmed the lease, or stopped the effect) and let go of the
// heartbeat: the log handler is code of the caller's, and one that blocks
// (a log sink stalled by the same outage) or calls runtime.Goexit must
// not delay the effect's stop past the lease, nor end the round before it.
func (h *heartbeat) round() {
	var log roundLog
	defer log.write(h.runtime())
	h.mu.Lock()
	defer h.mu.Unlock()
	hctx := h.renewCtx()
	if hctx == nil || hctx.Err() != nil {
		return // stopped
	}
	ctx, rt, id := h.ctx, h.runtime(), *h.id
	log.ctx, log.id, log.version = ctx, id, h.version
	every := h.lease / renewEvery
	margin := h.lease / leaseMargin
	safeUntil := h.confirmed.Add(h.lease - margin)
	if late := time.Until(safeUntil) <= 0; late {
		// This round starts after the lease could have expired (the
		// process was starved or paused): one quick renewal tells
		// whether anyone took over meanwhile (a takeover changes the
		// version, and the renewal's compare-and-set fails).
		safeUntil = time.Now().Add(min(every/2, margin))
	}
	rctx, rcancel := context.WithDeadline(hctx, safeUntil)
	defer rcancel()
	type result struct {
		sent time.Time
		err  error
	}
	results := make(chan result, maxRenewals)
	inflight, started := 0, 0
	params := RenewParams{ID: id, State: h.state, Owner: rt.cfg.owner, Version: h.version, Lease: h.lease}
	attempt := func() {
		inflight++
		started++
		sent := time.Now()
		go func() {
			_, err := rt.store.Renew(rctx, params)
			results <- result{sent, err}
		}()
	}
	hedge := time.NewTimer(every / 2)
	defer hedge.Stop()
	var retry <-chan time.Time
	backoff := 5 * time.Millisecond
	var last error
	attempt()
	for {
		select {
		case r := <-results:
			inflight--
			switch {
			case r.err == nil:
				h.confirmed = r.sent
				rt.renewals.schedule(h, r.sent.Add(every))
				return
			case errors.Is(r.err, ErrLeaseLost):
				log.lost = !h.completing.Load()
				h.stopEffect(fmt.Errorf("%w: %s %q", ErrLeaseLost, id.Operation, id.Key))
				return
			case rctx.Err() == nil:
				last = r.err
				log.failures, log.last = log.failures+1, r.err
				if retry == nil {
					retry = time.After(backoff)
					backoff = min(backoff*2, every/4)
				}
			}
		case <-retry:
			retry = nil
			if inflight < maxRenewalsInFlight && started < maxRenewals {
				attempt()
			}
		case <-hedge.C:
			if inflight < maxRenewalsInFlight && started < maxRenewals {
				attempt()
			}
			hedge.Reset(every / 2)
		case <-rctx.Done():
			if hctx.Err() != nil {
				return // stopped
			}
			if !h.stopUnconfirmed || h.completing.Load() {
				// No effect to stop (a query, or the effect returned
				// and its outcome is being recorded by CAS): keep
				// trying; the next round starts late, with one quick
				// renewal.
				rt.renewals.schedule(h, time.Now())
				return
			}
			// Past safeUntil the lease may be gone before this worker
			// could learn it: stop the effect now.
			log.stopped = !h.completing.Load()
			h.stopEffect(&errLeaseUnconfirmed{id: id, last: last})
			return
		}
	}
}

// roundLog is what a renewal round logs once it is over (see
// [heartbeat.round]).
type roundLog struct {
	ctx      context.Context
	id       Identity
	version  int64
	failures int   // renewals that failed and were retried
	last     error // the last of them
	lost     bool  // the lease was lost while the effect ran
	stopped  bool  // the effect was stopped: the lease could not be confirmed in time
}

func (l *roundLog) write(rt *Runtime) {
	if l.ctx == nil {
		return // the round did not run
	}
	logger := rt.cfg.logger
	switch {
	case l.lost:
		logger.WarnContext(l.ctx, "idem: lease lost while the effect ran",
			"operation", l.id.Operation, "key", l.id.Key, "version", l.version)
	case l.stopped:
		logger.WarnContext(l.ctx, "idem: the lease could not be renewed in time; the effect was stopped before the lease could expire",
			"operation", l.id.Operation, "key", l.id.Key, "version", l.version, "failures", l.failures, "err", l.last)
	case l.failures > 0:
		logger.WarnContext(l.ctx, "idem: renewing lease failed; retried",
			"operation", l.id.Operation, "key", l.id.Key, "failures", l.failures, "err", l.last)
	}
}

// cutResponse encodes the [Cutter] form of the response being recorded, or
// returns nil when its type has none.
func (ex *execution[Req, Resp]) cutResponse() (b []byte) {
	c, ok := any(&ex.resp).(Cutter[Resp])
	if !ok {
		return nil
	}
	// Cut is code of the caller's: one that panics has no short form.
	returned := false
	defer func() {
		if !returned {
			recover()
			b = nil
		}
	}()
	short := c.Cut()
	returned = true
	b, err := encodeResponse(ex.rt, &short)
	if err != nil {
		return nil
	}
	return b
}

// complete runs a store write that records an outcome on a context the
// caller cannot cancel, bounded by the completion timeout, retrying
// transient store errors (see [retryWrite] and [TransitionParams.Token]).
//
// With release set it deletes the record held as tp says (tp.From,
// tp.Owner, tp.Version); otherwise it runs the transition tp, updating *tp
// to what was written (see [fitTransition]) and returning the new version.
func (ex *execution[Req, Resp]) complete(ctx context.Context, release bool, tp *TransitionParams) (int64, error) {
	// The first completion of a call writes with the context the call
	// carries; a later one (after an inline reconciliation) with its own.
	cctx := &ex.run.cctx
	if cctx.parent != nil {
		cctx = new(completionCtx)
	}
	*cctx = completionCtx{parent: ctx, deadline: time.Now().Add(ex.rt.cfg.completionTimeout)}
	defer cctx.release()
	// The response being recorded (the effect's, or the one a query found:
	// ex.resp either way) has a short form for the size rule when its type
	// is a Cutter.
	var c responseCutter
	if tp.To == StateSuccess {
		c = ex
	}
	var v int64
	var applied func(context.Context) (bool, error)
	if release {
		applied = releaseApplied(ex.rt.store, tp.ID, ex.created)
	}
	err := retryWrite(cctx, applied, func(wctx context.Context) error {
		var err error
		if release {
			err = ex.rt.store.Release(wctx, ReleaseParams{ID: tp.ID, State: tp.From, Owner: tp.Owner, Version: tp.Version})
		} else {
			v, err = fitTransition(wctx, ex.rt.store, tp, c)
		}
		return err
	}, func(err error) {
		ex.rt.cfg.logger.WarnContext(ctx, "idem: recording outcome failed; retrying",
			"operation", ex.id.Operation, "key", ex.id.Key, "err", err)
	})
	return v, err
}

// retryWrite runs write, retrying transient store errors with backoff for
// as long as ctx allows (onRetry, when not nil, hears each). ErrLeaseLost
// and ErrTooLarge are final. A transition carries a token, so a retry of a
// write that was applied reports success. A release cannot be recognised
// so (the record is gone): for a release, applied (not nil) tells, when a
// retry finds the record changed (ErrLeaseLost after a failed try),
// whether an earlier try deleted it (see [releaseApplied]); a failure to
// tell is retried as a transient error.
func retryWrite(ctx context.Context, applied func(context.Context) (bool, error), write func(context.Context) error, onRetry func(error)) error {
	backoff := 10 * time.Millisecond
	for tries := 1; ; tries++ {
		err := write(ctx)
		if applied != nil && tries > 1 && errors.Is(err, ErrLeaseLost) {
			done, aerr := applied(ctx)
			switch {
			case aerr == nil && done:
				return nil
			case aerr == nil:
				return err
			}
			err = aerr
		}
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrTooLarge) {
			return err
		}
		if onRetry != nil {
			onRetry(err)
		}
		if serr := sleepCtx(ctx, backoff); serr != nil {
			return err
		}
		backoff = min(backoff*2, time.Second)
	}
}

// releaseApplied tells whether a release of the life of id created at
// created, retried after a failed try and refused (the record changed),
// was applied by that earlier try: the record is gone, or another life of
// it is there (deleted, then claimed anew). The same life, changed (another
// worker acquired or took it over), was not released.
func releaseApplied(store Store, id Identity, created time.Time) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		cur, err := store.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return true, nil
		case err != nil:
			return false, err
		}
		return !cur.CreatedAt.Equal(created), nil
	}
}

// reconcileInline asks the operation's query about a record this owner holds
// that an earlier attempt may have acted on (UNKNOWN, or PROCESSING taken
// over), and converges it, runs the effect, or leaves it UNKNOWN. The lease
// is renewed while the query runs (a lost lease cancels it), and the effect
// runs only after a compare-and-set from the version the query was asked
// under: a worker whose lease was taken over during its query never runs
// the effect.
func (ex *execution[Req, Resp]) reconcileInline(ctx context.Context, rec Record) (Resp, error) {
	var zero Resp
	rt, op := ex.rt, ex.id.Operation
	start := time.Now()
	qctx := new(effectCtx)
	qctx.init(ctx, ex.rt, ex.id, rec.Version, rec.Takeovers > 0, ex.c.Scope)
	defer qctx.release()
	// A query has no effect to stop when the lease cannot be confirmed:
	// what it learns is recorded by CAS on the version, which fails if
	// anyone took over meanwhile. Only a lost lease cancels it. (Its own
	// heartbeat: the effect's may start before this one's last round ends.)
	hb := new(heartbeat)
	ex.startHeartbeat(hb, ctx, rec, ex.granted, false, qctx)
	defer hb.stop()
	tctx, tcancel := context.WithTimeout(qctx, rt.cfg.queryTimeout)
	resp, outcome, qerr := ex.runQuery(tctx)
	tcancel()
	rt.phase(ctx, op, PhaseQuery, start)
	if cause := qctx.stopCause(); errors.Is(cause, ErrLeaseLost) { // this call's lease, not an outer call's
		rt.emit(ctx, Event{Kind: EventLeaseLost, Operation: op, State: rec.State, Err: cause})
		return zero, fmt.Errorf("%w: %s %q: another worker took over (version %d) while the query ran", ErrLeaseLost, op, ex.id.Key, rec.Version)
	}
	hb.completing.Store(true)
	tp := TransitionParams{ID: ex.id, From: rec.State, Owner: rt.cfg.owner, Version: rec.Version, To: StateUnknown, Token: rt.newToken()}
	switch outcome {
	case OutcomeSucceeded:
		ex.resp = resp                      // what the size rule cuts, if the store refuses it whole
		b, err := encodeResponse(rt, &resp) // a fresh slice: the store may keep it
		if err != nil {
			tp.ResponseOmitted, tp.Note = true, "response not stored: encoding the queried response failed: "+errorText(err)
		}
		tp.To, tp.Response, tp.TTL = StateSuccess, b, ex.ttl
	case OutcomeFailed:
		tp.To, tp.Response, tp.TTL = StateFailed, EncodeFailure(qerr), ex.ttl
	case OutcomeNotHappened:
		// Compare-and-set to a new version before the effect: if another
		// worker took the record over meanwhile, this one learns it here.
		tp.To, tp.NewOwner, tp.Lease = StateProcessing, rt.cfg.owner, ex.lease
		granted := time.Now()
		v, err := ex.transition(ctx, &tp)
		hb.stop()
		if err != nil {
			return zero, err
		}
		rec.State, rec.Version = StateProcessing, v
		// The query found that nothing happened. What an earlier attempt
		// may have done is still not known for sure (hold.earlier): a
		// call that leaves now records UNKNOWN, and a local call's claim
		// is released (see runClaimed).
		ex.hold = holding{version: v, earlier: ex.hold.earlier}
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op, State: StateProcessing})
		ex.granted = granted
		return ex.execute(ctx, rec)
	}
	// UNKNOWN leaves no lease, so the next duplicate or reconciler may ask
	// again. A query that cannot tell either keeps the record's note: a
	// record the reconciler gave up on stays marked so (its attempts are
	// used: no reconciler writes it again), as Resolve's hand-back keeps it.
	if tp.To == StateUnknown {
		tp.Note = rec.Note
	}
	if _, err := ex.transition(ctx, &tp); err != nil {
		if tp.To == StateSuccess && !errors.Is(err, ErrLeaseLost) {
			// The query found the effect done: its response is the
			// call's answer, as an effect's is when its outcome cannot be
			// recorded.
			return resp, fmt.Errorf("%w: %s %q: the query found the effect done, but its outcome was not recorded: %w", ErrNotRecorded, op, ex.id.Key, err)
		}
		if qerr != nil { // quoted, not wrapped: the query's answer was not recorded
			return zero, fmt.Errorf("%w (the query said: %v)", err, qerr)
		}
		return zero, err
	}
	switch tp.To {
	case StateSuccess:
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op, State: StateSuccess})
		return resp, nil
	case StateFailed:
		rt.emit(ctx, Event{Kind: EventReconciled, Operation: op, State: StateFailed})
		return zero, decodeFailure(ex.id, tp.Response)
	}
	rt.emit(ctx, Event{Kind: EventUnknown, Operation: op, State: StateUnknown, Err: qerr})
	if qerr != nil {
		return zero, fmt.Errorf("%w: %s %q: query: %w", ErrOutcomeUnknown, op, ex.id.Key, notPermanent(qerr))
	}
	return zero, fmt.Errorf("%w: %s %q: the query cannot tell yet", ErrOutcomeUnknown, op, ex.id.Key)
}

func (ex *execution[Req, Resp]) transition(ctx context.Context, tp *TransitionParams) (int64, error) {
	v, err := ex.complete(ctx, false, tp)
	if err != nil {
		return 0, fmt.Errorf("idem: %s %q: recording %s: %w", ex.id.Operation, ex.id.Key, tp.To, err)
	}
	return v, nil
}

func (ex *execution[Req, Resp]) runQuery(ctx context.Context) (resp Resp, o Outcome, err error) {
	returned := false
	defer func() {
		if !returned {
			o, err = OutcomeUnknown, &PanicError{Value: recover(), Stack: debug.Stack(), of: "query"}
		}
	}()
	resp, o, err = ex.c.Query(ctx, ex.c.Request)
	returned = true
	return resp, answered(o, err), errtree.Acyclic(err)
}
