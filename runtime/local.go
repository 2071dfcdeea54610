package runtime

import (
	"context"
	"errors"
	"fmt"
)

// Local is a store's own way of running a call whose effect writes in the
// store's database: the effect runs inside a transaction the store
// provides (a savepoint of the caller's transaction, for pgstore.DoTx), and
// its SUCCESS record is written in that same transaction, so that the
// effect's writes and the outcome commit or roll back together. [DoLocal]
// runs the protocol around it, the one [Do] runs: the claim and its wait
// for a call in flight, replays, the lease rule and its renewals, the size
// rule, the FAILED record and the release. A Local supplies only what is
// its own.
type Local interface {
	// Begin readies the transaction once the claim rec is granted, before
	// the effect runs: pgstore names the caller's transaction on the claim
	// and opens a savepoint. The lease is renewed meanwhile. After an
	// error the effect does not run, Finish is not called, and the claim
	// is released (unless the error is [ErrLeaseLost]: another worker
	// holds it); the error is returned as it is.
	Begin(ctx context.Context, rec Record) error
	// Transition writes p, the SUCCESS transition from the claim, inside
	// the transaction, as [Store.Transition] writes it on its own:
	// [ErrLeaseLost] when the compare-and-set finds the claim gone,
	// [ErrTooLarge] (before writing anything) over the store's limit. It
	// is called after the renewals have stopped (one on another
	// connection would wait for the transaction's lock on the record) and
	// may be called again with a smaller p, as the size rule says.
	Transition(ctx context.Context, p TransitionParams) (int64, error)
	// Finish ends what Begin started: keep makes the effect's writes (and
	// the SUCCESS record) part of the transaction; !keep discards them,
	// after the effect failed, panicked or lost its lease, or after
	// Transition failed. An error means the transaction may hold writes
	// it must not commit: the call returns it, and the claim is kept for
	// the transaction's end to decide.
	Finish(ctx context.Context, keep bool) error
}

// LocalReader is a [Local] that reads a record as its own transaction sees
// it. [DoLocal] asks it once, when the store answers that the call is in
// flight (a live claim, or a row another transaction holds): that
// transaction may be the Local's own, holding the outcome of an earlier
// call of the same identity, written and not yet committed, which no other
// connection can see (pgstore.DoTx called twice with one key in one
// transaction), or holding the claim of such a call and nothing else.
//
// A final record (SUCCESS or FAILED) that has not expired by its StoreNow,
// or that the transaction wrote itself ([LocalRecord.Own]), is replayed at
// once, as a claim's would be (a request that differs is [ErrKeyReused]). A claim the transaction owns ([LocalRecord.Own]) is
// never waited for: while the call that made it runs, this call was made
// from inside its effect and gets [ErrInProgress] at once; once that call
// has returned, its outcome is gone from the transaction (a savepoint
// around it was rolled back), and the claim is released by compare-and-set
// and claimed again. A request that differs from the claim's is
// [ErrKeyReused] in both cases. Anything else, or [ErrNotFound], leaves the call to
// wait for the call in flight as before.
type LocalReader interface {
	Local
	// Read returns id's record as the Local's transaction sees it, or
	// [ErrNotFound].
	Read(ctx context.Context, id Identity) (LocalRecord, error)
}

// LocalRecord is a record as a [LocalReader]'s transaction sees it.
type LocalRecord struct {
	Record
	// Own reports that Record is a PROCESSING claim that an earlier call of
	// the identity made for this very transaction, in this process, or an
	// outcome such a call wrote in it (replayed even once expired: the
	// effect's writes are in the transaction).
	Own bool
	// Running reports, with Own, that the call that made the claim has
	// not returned: this call was made from inside its effect.
	Running bool
}

// localAnswer is what a LocalReader's record tells a call in flight.
type localAnswer int

const (
	localWait      localAnswer = iota // not the transaction's: wait as before
	localReplay                       // a final outcome: replay it
	localReentrant                    // the transaction's own call, still running
	localAbandoned                    // the transaction's own claim, its call returned
)

// askLocal reads id's record through local, if it is a [LocalReader], and
// says what the call does with it.
func askLocal(ctx context.Context, local Local, id Identity) (LocalRecord, localAnswer, error) {
	lr, ok := local.(LocalReader)
	if !ok {
		return LocalRecord{}, localWait, nil
	}
	rec, err := lr.Read(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return LocalRecord{}, localWait, nil
	case err != nil:
		return LocalRecord{}, localWait, fmt.Errorf("idem: %s %q: reading the record in the call's transaction: %w", id.Operation, id.Key, err)
	case rec.ID != id:
		return LocalRecord{}, localWait, fmt.Errorf("idem: %s %q: reading the record in the call's transaction: the store returned the record of %s", id.Operation, id.Key, idText(rec.ID))
	}
	switch {
	case rec.State.Final():
		// An expired outcome is not replayed, unless the transaction wrote
		// it itself (its effect's writes are in the transaction): a
		// transaction whose snapshot predates the sweep (REPEATABLE READ)
		// may still see one whose key has begun a new life since.
		if rec.Own || rec.ExpiresAt.After(rec.StoreNow) {
			return rec, localReplay, nil
		}
	case rec.Own && rec.State == StateProcessing && rec.Running:
		return rec, localReentrant, nil
	case rec.Own && rec.State == StateProcessing:
		return rec, localAbandoned, nil
	}
	return rec, localWait, nil
}

// DoLocal runs c exactly once per identity, as [Do] does, with l running
// its effect in l's transaction: c's effect runs once Begin has readied
// the transaction, and a SUCCESS outcome is written by l inside it. c must
// have no Query: the effect's writes are undone whenever its outcome is
// not recorded, so there is nothing to ask a downstream about.
//
// Outcomes differ from [Do]'s where the transaction makes them certain:
// when the effect fails, panics or loses its lease, Finish discards its
// writes first; a [Permanent] error is then recorded as FAILED (committed
// by the store on its own, as Do records it) unless it is [Uncertain], and
// any other error, a timeout included (marked Permanent or not), releases
// the claim (nothing happened), so a retry runs the effect again. A call
// whose lease was taken over returns [ErrLeaseLost].
func DoLocal[Req, Resp any](ctx context.Context, rt *Runtime, c Call[Req, Resp], l Local) (Resp, error) {
	if l == nil {
		var zero Resp
		return zero, fmt.Errorf("idem: %s: DoLocal with a nil Local", c.Operation)
	}
	if c.Query != nil {
		var zero Resp
		return zero, fmt.Errorf("idem: %s: a local call has no query (its writes are undone unless its outcome is recorded)", c.Operation)
	}
	return do(ctx, rt, c, l)
}

// executeLocal runs the effect of a claim held by this owner inside the
// Local's transaction and records its outcome; execute has checked the
// start and started the heartbeat hb on effCtx.
func (ex *execution[Req, Resp]) executeLocal(ctx context.Context, rec Record, effCtx *effectCtx, hb *heartbeat) (Resp, error) {
	var zero Resp
	id, l := ex.id, ex.local
	tp := &ex.run.tp
	*tp = TransitionParams{ID: id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version}
	if err := l.Begin(ctx, rec); err != nil {
		hb.completing.Store(true)
		hb.stop()
		if errors.Is(err, ErrLeaseLost) {
			ex.rt.emit(ctx, Event{Kind: EventLeaseLost, Operation: id.Operation, State: StateProcessing, Err: err})
			return zero, err
		}
		_, rerr := ex.complete(ctx, true, tp)
		ex.rt.emit(ctx, Event{Kind: EventReleased, Operation: id.Operation, Err: err})
		return zero, errors.Join(err, ex.releaseErr(rerr))
	}
	// From here the Local's work is undone by Finish(false) on every path;
	// a call that leaves before Finish ran (runtime.Goexit in the effect,
	// a panic in code of the caller's between the steps: a logger's
	// handler) undoes it too and releases the claim on its way out, so
	// that neither the writes nor the claim's renewals outlive the call.
	finished := false
	finish := func(keep bool) error {
		finished = true
		return l.Finish(ctx, keep)
	}
	defer func() {
		if finished {
			return
		}
		hb.completing.Store(true)
		hb.stop()
		ferr := l.Finish(ctx, false)
		*tp = TransitionParams{ID: id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version}
		_, rerr := ex.complete(ctx, true, tp)
		ex.rt.cfg.logger.ErrorContext(ctx, "idem: the local call ended (a panic or runtime.Goexit) before its outcome was recorded; its writes were undone and its claim released",
			"operation", id.Operation, "key", id.Key, "err", errors.Join(ferr, rerr))
	}()
	ex.hold.owned = true // the way out above is the call's from here
	start := ex.rt.phaseStart()
	panicked, err := ex.runEffect(effCtx)
	resp := ex.resp
	ex.rt.phase(ctx, id.Operation, PhaseEffect, start)
	// The renewals end before the record is written in the transaction: a
	// renewal on another connection would wait for the transaction's lock
	// on the record. The compare-and-set below fences a worker whose lease
	// was taken over meanwhile.
	hb.completing.Store(true)
	hb.stop()
	cause := effCtx.stopCause() // this call's lease, not a cause the caller's context carried in
	leaseLost := cause != nil && errors.Is(cause, ErrLeaseLost) && !isUnconfirmed(cause)

	if panicked == nil && err == nil && !leaseLost {
		tp.To, tp.TTL, tp.Token = StateSuccess, ex.ttl, ex.rt.newToken()
		if b, merr := encodeResponse(ex.rt, &ex.resp); merr != nil {
			tp.ResponseOmitted, tp.Note = true, "response not stored: encoding it failed: "+errorText(merr)
		} else {
			tp.Response = b
		}
		start = ex.rt.phaseStart()
		cerr := ex.recordLocal(ctx, tp)
		if cerr == nil {
			cerr = finish(true)
			ex.rt.phase(ctx, id.Operation, PhaseComplete, start)
			if cerr != nil {
				// The SUCCESS record may be in the transaction: the caller
				// must roll it back; the claim stays for its end to decide.
				ex.observeOutcome(ctx, StateSuccess, nil, cerr, false)
				return zero, cerr
			}
			ex.observeOutcome(ctx, StateSuccess, nil, nil, false)
			if tp.ResponseOmitted {
				ex.rt.cfg.logger.WarnContext(ctx, "idem: the effect succeeded but its response was not stored; duplicates get ErrNotReplayable",
					"operation", id.Operation, "key", id.Key, "note", tp.Note)
			}
			return resp, nil
		}
		ex.rt.phase(ctx, id.Operation, PhaseComplete, start)
		if ferr := finish(false); ferr != nil {
			ex.observeOutcome(ctx, StateSuccess, nil, ferr, false)
			return zero, errors.Join(ferr, cerr)
		}
		if errors.Is(cerr, ErrLeaseLost) {
			ex.observeOutcome(ctx, StateSuccess, nil, cerr, true)
			return zero, ex.localLost(rec, nil)
		}
		*tp = TransitionParams{ID: id, From: StateProcessing, Owner: ex.rt.cfg.owner, Version: rec.Version}
		_, rerr := ex.complete(ctx, true, tp)
		err = fmt.Errorf("idem: %s %q: recording success: %w", id.Operation, id.Key, cerr)
		ex.observeOutcome(ctx, "", err, rerr, false)
		return zero, errors.Join(err, ex.releaseErr(rerr))
	}

	// The effect failed, panicked or lost its lease: its writes go first.
	attempt := err
	if panicked != nil {
		attempt = panicked
	}
	if ferr := finish(false); ferr != nil {
		ex.observeOutcome(ctx, "", err, ferr, false)
		if panicked != nil && !ex.rt.cfg.recoverPanics {
			panic(panicked.Value)
		}
		// The effect's error is quoted, not wrapped: it is not the outcome.
		if cause != nil && errors.Is(cause, ErrLeaseLost) {
			// The lease rule stopped the effect inside a statement, whose
			// connection closed (the Local's error says to roll back):
			// the caller learns why too, as ErrLeaseLost.
			return zero, fmt.Errorf("%w (the effect returned: %v); %w", ferr, attempt, cause)
		}
		return zero, fmt.Errorf("%w (the effect returned: %v)", ferr, attempt)
	}
	if leaseLost {
		ex.observeOutcome(ctx, "", err, nil, true)
		if panicked != nil && !ex.rt.cfg.recoverPanics {
			panic(panicked.Value)
		}
		return zero, ex.localLost(rec, attempt)
	}
	// A failure is recorded FAILED only when its mark, as Classify reads it
	// (the first Permanent or Retryable in its tree: Retryable(Permanent(x))
	// is retryable), is Permanent, and it is not uncertain: a timeout or a
	// cancellation anywhere in its tree is never a permanent failure,
	// whatever Permanent says (the classification rule, [Runtime.Classify]).
	// Here the effect's writes are undone, so any other failure releases
	// the claim.
	release := panicked != nil || !errorPermanent(err) || errorUncertain(err)
	if !release {
		tp.To, tp.Response, tp.TTL, tp.Token = StateFailed, EncodeFailure(err), ex.ttl, ex.rt.newToken()
	}
	start = ex.rt.phaseStart()
	_, cerr := ex.complete(ctx, release, tp)
	ex.rt.phase(ctx, id.Operation, PhaseComplete, start)
	ex.observeOutcome(ctx, tp.To, err, cerr, false)
	if panicked != nil {
		if !ex.rt.cfg.recoverPanics {
			panic(panicked.Value)
		}
		return zero, errors.Join(notPermanent(attempt), ex.releaseErr(cerr))
	}
	// Released: the next call runs the effect again, so a Permanent in the
	// effect's error (under a timeout, or the Retryable that decided) is
	// not the call's outcome.
	switch {
	case release && cause != nil && errors.Is(cause, ErrLeaseLost) && !errorIs(err, ErrLeaseLost):
		// The lease rule stopped the effect, which returned its own error
		// (a statement cancelled on the server, "canceling statement due
		// to user request"), not the context's: the caller learns why.
		return zero, errors.Join(fmt.Errorf("%w; its writes were undone and the claim released (the effect returned: %w)", cause, notPermanent(err)), ex.releaseErr(cerr))
	case release:
		return zero, errors.Join(notPermanent(err), ex.releaseErr(cerr))
	case errors.Is(cerr, ErrLeaseLost):
		return zero, ex.localLost(rec, err)
	case cerr != nil:
		// Quoted, not wrapped: duplicates are not told this failure, so
		// the caller must not be told it as the outcome either.
		return zero, fmt.Errorf("idem: %s %q: the effect failed permanently (%v) but recording it failed; its writes were undone and the claim stays until its lease expires: %w",
			id.Operation, id.Key, err, cerr)
	}
	return zero, err
}

// recordLocal writes the SUCCESS transition tp through the Local, as the
// size rule says, on a context the caller cannot cancel, bounded by the
// completion timeout. It is not retried: a statement that failed inside a
// transaction leaves it unusable until rolled back.
func (ex *execution[Req, Resp]) recordLocal(ctx context.Context, tp *TransitionParams) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ex.rt.cfg.completionTimeout)
	defer cancel()
	_, err := fitTransition(cctx, ex.local, tp, ex)
	return err
}

// releaseErr describes a failed release of the claim (nil for none, and
// for a claim another worker took over: it is not this call's to free).
func (ex *execution[Req, Resp]) releaseErr(err error) error {
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return fmt.Errorf("idem: %s %q: releasing the claim (it stays until its lease expires): %w", ex.id.Operation, ex.id.Key, err)
}

// localLost is the error of a local call whose claim was taken over:
// another worker decides the outcome, so this attempt's own error is
// quoted, not wrapped.
func (ex *execution[Req, Resp]) localLost(rec Record, attempt error) error {
	msg := fmt.Sprintf("%s %q: another worker took over (version %d) before this attempt finished; its writes were undone",
		ex.id.Operation, ex.id.Key, rec.Version)
	if attempt != nil {
		msg += fmt.Sprintf(" (this attempt: %v)", attempt)
	}
	return fmt.Errorf("%w: %s", ErrLeaseLost, msg)
}
