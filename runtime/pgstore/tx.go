package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// TxCall is a call whose effect is writes in the same PostgreSQL database as
// the records: see [DoTx].
type TxCall[Req, Resp any] struct {
	// Operation and Key identify the call with the scope of the context, as
	// in [runtime.Call].
	Operation string
	Key       string
	Request   Req
	// Effect does the writes on tx. It runs inside a savepoint of the
	// caller's transaction.
	Effect func(ctx context.Context, tx pgx.Tx, req Req) (Resp, error)
	// Fingerprint, optional, overrides the SHA-256 of the encoded request.
	Fingerprint []byte
	// TTL, optional, overrides the runtime's TTL.
	TTL time.Duration
}

// ErrRollbackRequired: DoTx could not roll back (or release) its savepoint,
// so the caller's transaction may hold the effect's writes and a claim that
// must not be committed. Roll the transaction back; committing it could run
// the effect twice.
var ErrRollbackRequired = errors.New("pgstore: the transaction must be rolled back")

// ErrNotReadCommitted is returned by [DoTx] for a transaction whose
// isolation level is not READ COMMITTED (PostgreSQL's default), before the
// effect runs (its claim is freed; a duplicate of a recorded call still
// replays): a REPEATABLE READ or SERIALIZABLE snapshot cannot see the
// claim DoTx commits on its own connection, so the SUCCESS write would
// fail after the effect ran. The transaction stays usable.
var ErrNotReadCommitted = errors.New("pgstore: DoTx needs a READ COMMITTED transaction")

// DoTx runs a local effect exactly once: the effect's writes and the SUCCESS
// record are written inside tx, the caller's transaction, so they commit or
// roll back together. rt's store must be a *Store on the same database.
//
// The claim itself is committed first, on its own (PROCESSING, with the
// runtime's lease, renewed while the effect runs), and names tx's
// transaction ID (the record's xact column), so that a duplicate (DoTx in
// another transaction, or [runtime.Do]) never runs the effect while this
// call's transaction is open: it waits up to its runtime's MaxWait (while
// this call's lease is live, or tx holds the record's row: see
// [Store.Claim]), then gets [runtime.ErrInProgress], and replays the
// outcome, whatever it turns out to be. The effect runs inside
// a savepoint; SUCCESS is a compare-and-set from the claim, inside tx, so
// it commits with the effect's writes, and a worker that lost its lease
// meanwhile commits nothing. From that write on, the record's row, locked
// by tx, holds duplicates off until tx ends (their claims do not wait on
// the lock: see [Store.Claim]).
//
// When the effect fails, DoTx rolls back to its savepoint (the effect's
// writes are gone; the caller's transaction stays usable) and returns the
// error. A [runtime.Permanent] error is then recorded as FAILED, committed
// on its own, so it stands whether the caller commits or rolls back, and
// duplicates replay it; any other error releases the claim, so a retry runs
// the effect again. A response or failure over the store's record limit is
// recorded shortened, as the runtime's size rule says.
//
// If the caller rolls its transaction back after DoTx succeeded, nothing
// remains of the effect: the claim, still PROCESSING but naming a
// transaction that has ended, is taken over at once by the next duplicate,
// which runs the effect (so is one whose transaction commits without the
// SUCCESS write, e.g. after rolling back a savepoint around DoTx). Every
// query of this package reads the xact column, which [Store.Migrate] adds
// to a table of an earlier version: run it before deploying.
//
// DoTx uses a second connection of the store's pool, one statement at a
// time, while the caller holds tx: bound the transactions that call DoTx at
// once below the pool's size, or a pool whose every connection is such a
// transaction waits on itself. tx must be READ COMMITTED (PostgreSQL's
// default): any other level gets [ErrNotReadCommitted] before the effect
// runs.
func DoTx[Req, Resp any](ctx context.Context, rt *runtime.Runtime, tx pgx.Tx, c TxCall[Req, Resp]) (Resp, error) {
	var zero Resp
	s, ok := rt.Store().(*Store)
	if !ok {
		return zero, fmt.Errorf("pgstore: DoTx needs a runtime on a *pgstore.Store, not %T", rt.Store())
	}
	if c.Effect == nil {
		return zero, fmt.Errorf("pgstore: %s: call has no effect", c.Operation)
	}
	id, err := runtime.NewIdentity(ctx, c.Operation, c.Key)
	if err != nil {
		return zero, err
	}
	fp, reqBytes, err := runtime.EncodeRequest(rt, c.Request, c.Fingerprint)
	if err != nil {
		return zero, fmt.Errorf("pgstore: %s: encoding request: %w", c.Operation, err)
	}
	if err := s.checkSize("request", reqBytes); err != nil {
		return zero, err
	}
	ttl := c.TTL
	if ttl <= 0 {
		ttl = rt.TTL()
	}
	x := &txCall{s: s, rt: rt, id: id}
	rec, claimed, err := x.claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: reqBytes, Owner: rt.Owner(), Lease: rt.Lease()})
	if err != nil {
		return zero, err
	}
	if !claimed {
		return runtime.Replay[Resp](rt, rec, fp)
	}
	x.version = rec.Version
	// The transaction that will write SUCCESS: once it has ended, a
	// duplicate that finds the claim still PROCESSING takes it over at
	// once (it rolled back, or committed without the SUCCESS write); while
	// it is in progress, the claim is as live as its lease.
	// The caller's transaction: its ID names the claim (see markTx), and
	// its isolation level must be READ COMMITTED: under REPEATABLE READ or
	// SERIALIZABLE its snapshot (taken by now) predates the claim's
	// marking, and the SUCCESS write would fail after the effect ran. (A
	// replay reads nothing in it.)
	cur, err := s.q.WithTx(tx).CurrentXact(ctx)
	if err != nil {
		return zero, errors.Join(fmt.Errorf("pgstore: %s %q: reading the caller's transaction ID: %w", id.Operation, id.Key, err), x.release(ctx))
	}
	if cur.Isolation != "read committed" {
		return zero, errors.Join(fmt.Errorf("%w: %s %q: this transaction is %s; the effect did not run",
			ErrNotReadCommitted, id.Operation, id.Key, strings.ToUpper(cur.Isolation)), x.release(ctx))
	}
	if err := x.markTx(ctx, cur.Xact); err != nil {
		return zero, errors.Join(err, x.release(ctx))
	}

	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return zero, errors.Join(fmt.Errorf("pgstore: %s %q: savepoint: %w", id.Operation, id.Key, err), x.release(ctx))
	}
	// The savepoint is released or rolled back on a context the caller
	// cannot cancel, bounded by the completion timeout: with the caller's
	// context, once done, pgx fails the statement unsent and marks the
	// savepoint closed, and the effect's writes and the SUCCESS record
	// would stay in the caller's transaction, to be committed.
	finish := func(release bool) error {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.CompletionTimeout())
		defer cancel()
		if release {
			if err := sp.Commit(fctx); err != nil {
				return fmt.Errorf("%w: %s %q: releasing the savepoint: %w", ErrRollbackRequired, id.Operation, id.Key, err)
			}
			return nil
		}
		if err := sp.Rollback(fctx); err != nil {
			return fmt.Errorf("%w: %s %q: rolling back to the savepoint left the effect's writes in the transaction: %w",
				ErrRollbackRequired, id.Operation, id.Key, err)
		}
		return nil
	}

	effCtx, cancelEffect := context.WithCancelCause(runtime.WithAttempt(ctx, runtime.Attempt{
		ID: id, FencingToken: rec.Version, DownstreamKey: runtime.DownstreamKey(id), TakenOver: rec.Takeovers > 0,
	}))
	defer cancelEffect(nil)
	hb := x.renew(ctx, cancelEffect)
	done := false
	defer func() {
		if !done { // a panic in the effect: undo it, free the claim, let the panic go on
			hb.stop()
			if finish(false) == nil {
				_ = x.release(ctx)
			}
		}
	}()
	resp, err := c.Effect(effCtx, sp, c.Request)
	// The renewals end before any write to the record: once this
	// transaction has written it, a renewal on another connection would
	// wait for this transaction to end.
	hb.stop()
	leaseLost := errors.Is(context.Cause(effCtx), runtime.ErrLeaseLost)
	if err != nil || leaseLost {
		done = true
		if rerr := finish(false); rerr != nil {
			// The claim is kept: the effect's writes may still commit. The
			// effect's error is quoted, not wrapped: it is not the outcome.
			return zero, fmt.Errorf("%w (the effect returned: %v)", rerr, err)
		}
		switch {
		case leaseLost:
			return zero, x.lostErr(err)
		case errors.Is(err, runtime.ErrPermanent):
			return zero, x.fail(ctx, err, ttl)
		}
		if rerr := x.release(ctx); rerr != nil {
			return zero, errors.Join(err, rerr)
		}
		return zero, err
	}

	tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: rt.Owner(), Version: rec.Version,
		To: runtime.StateSuccess, TTL: ttl}
	if body, merr := rt.Codec().Marshal(resp); merr != nil {
		tp.ResponseOmitted, tp.Note = true, "response not stored: encoding it failed: "+merr.Error()
	} else if s.checkSize("response", body) != nil {
		// The size rule: the effect is recorded as done, without a
		// response to replay (duplicates get runtime.ErrNotReplayable).
		tp.ResponseOmitted, tp.Note = true, fmt.Sprintf("response not stored: %d bytes, more than the store accepts (%d)", len(body), s.maxBytes)
	} else {
		tp.Response = body
	}
	// The claim's lease stays as it is: the SUCCESS write below locks the
	// record's row until the caller's transaction ends. A duplicate waits
	// for that transaction while it is in progress (the row is held, or its
	// lease is live), replays SUCCESS once it commits, and takes the claim
	// over at once if it rolls back (see the xact column in schema.sql).
	if s.beforeSuccess != nil {
		s.beforeSuccess()
	}
	_, terr := s.transition(ctx, s.q.WithTx(sp), tp)
	if terr != nil {
		done = true
		if rerr := finish(false); rerr != nil {
			return zero, errors.Join(rerr, terr)
		}
		if errors.Is(terr, runtime.ErrLeaseLost) {
			return zero, x.lostErr(nil)
		}
		return zero, errors.Join(fmt.Errorf("pgstore: %s %q: recording success: %w", id.Operation, id.Key, terr), x.release(ctx))
	}
	done = true
	if err := finish(true); err != nil {
		return zero, err
	}
	return resp, nil
}

// txCall is the part of a DoTx call that works on the record outside the
// caller's transaction.
type txCall struct {
	s       *Store
	rt      *runtime.Runtime
	id      runtime.Identity
	version int64 // of the claim
}

// claim claims the record, committed on its own, or returns the record to
// replay after waiting, like [runtime.Do], for a call in flight, at most
// MaxWait (a record whose row the open transaction of another DoTx holds:
// see [Store.Claim]).
func (x *txCall) claim(ctx context.Context, p runtime.ClaimParams) (rec runtime.Record, claimed bool, err error) {
	id := x.id
	var waitUntil time.Time
	backoff := 5 * time.Millisecond
	// wait pauses once (at most until limit) while MaxWait, counted from
	// the first claim that saw the call in flight, allows; past it, it
	// returns what says.
	wait := func(limit time.Duration, what func() error) error {
		left := time.Until(waitUntil)
		if left <= 0 {
			return what()
		}
		if err := sleepCtx(ctx, min(backoff, left, limit)); err != nil {
			return fmt.Errorf("pgstore: %s %q: waiting for the call in flight: %w", id.Operation, id.Key, err)
		}
		backoff = min(backoff*2, 250*time.Millisecond)
		return nil
	}
	for range 1000 {
		start := time.Now()
		res, err := x.s.claim(ctx, x.s.q, p)
		if errors.Is(err, runtime.ErrInProgress) {
			// Another transaction holds the record's row (a DoTx that
			// recorded its outcome, not yet committed): wait as for a live
			// lease, as runtime.Do does, the store's tries included.
			if waitUntil.IsZero() {
				waitUntil = start.Add(x.rt.MaxWait())
			}
			if werr := wait(time.Hour, func() error {
				return fmt.Errorf("pgstore: %s %q: claim: %w", id.Operation, id.Key, err)
			}); werr != nil {
				return rec, false, werr
			}
			continue
		}
		if err != nil {
			return rec, false, fmt.Errorf("pgstore: %s %q: claim: %w", id.Operation, id.Key, err)
		}
		if res.Claimed {
			return res.Record, true, nil
		}
		rec = res.Record
		for {
			if rec.State != runtime.StateProcessing || !bytes.Equal(rec.Fingerprint, p.Fingerprint) {
				return rec, false, nil // replay it (an UNKNOWN record: ErrOutcomeUnknown)
			}
			if !rec.LeaseLive() {
				break // claim again: take it over
			}
			if waitUntil.IsZero() {
				waitUntil = time.Now().Add(x.rt.MaxWait())
			}
			leaseLeft := rec.LeaseExpiresAt.Sub(rec.StoreNow)
			if werr := wait(leaseLeft+time.Millisecond, func() error {
				return fmt.Errorf("%w: %s %q (lease held by another worker for %v more)",
					runtime.ErrInProgress, id.Operation, id.Key, leaseLeft.Round(time.Millisecond))
			}); werr != nil {
				return rec, false, werr
			}
			rec, err = x.s.Get(ctx, id)
			if errors.Is(err, runtime.ErrNotFound) {
				break // released: claim again
			}
			if err != nil {
				return rec, false, fmt.Errorf("pgstore: %s %q: %w", id.Operation, id.Key, err)
			}
		}
	}
	return rec, false, fmt.Errorf("pgstore: %s %q: the store neither grants nor refuses the claim", id.Operation, id.Key)
}

// heartbeat renews the claim's lease every third of it while the effect
// runs (after a failed renewal, again soon, each bounded by a third of the
// lease); when the lease is found lost it cancels the effect with cause
// runtime.ErrLeaseLost. Safety does not rest on it (the SUCCESS
// compare-and-set inside the caller's transaction fences a worker that lost
// its lease): it keeps a live worker's claim from being taken over, and the
// lease live until a permanent failure is recorded.
type heartbeat struct {
	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
}

// stop ends the renewals, waiting for one in progress (bounded by its
// timeout, a third of the lease).
func (h *heartbeat) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.timer.Stop()
}

func (x *txCall) renew(ctx context.Context, cancel context.CancelCauseFunc) *heartbeat {
	lease := x.rt.Lease()
	every := lease / 3
	h := &heartbeat{}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(every, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), every)
		_, err := x.s.Renew(rctx, runtime.RenewParams{ID: x.id, State: runtime.StateProcessing, Owner: x.rt.Owner(), Version: x.version, Lease: lease})
		rcancel()
		if errors.Is(err, runtime.ErrLeaseLost) {
			cancel(fmt.Errorf("%w: %s %q", runtime.ErrLeaseLost, x.id.Operation, x.id.Key))
			return
		}
		next := every
		if err != nil {
			next = max(every/8, time.Millisecond) // the lease is running out: try again soon
		}
		h.timer.Reset(next)
	})
	return h
}

// markTx names xact, the caller's transaction, on the claim just made,
// committed on its own. A claim taken over in between (its lease expired
// while the store was unreachable) is lost: the effect has not run.
func (x *txCall) markTx(ctx context.Context, xact string) error {
	var marked int64
	err := x.write(ctx, false, func(wctx context.Context) error {
		var err error
		marked, err = x.s.q.MarkClaimTx(wctx, db.MarkClaimTxParams{Xact: xact, Scope: x.id.Scope, Operation: x.id.Operation,
			Key: x.id.Key, Owner: x.rt.Owner(), Version: x.version})
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: naming the caller's transaction on the claim: %w", x.id.Operation, x.id.Key, err)
	}
	if marked == 0 {
		return x.lostErr(nil)
	}
	return nil
}

// lostErr is the error of a call whose claim was taken over: another worker
// decides the outcome, so this attempt's own error is quoted, not wrapped
// (a permanent failure of this attempt is not the call's outcome).
func (x *txCall) lostErr(attempt error) error {
	msg := fmt.Sprintf("%s %q: another worker took over (version %d) before this attempt finished; its writes were rolled back",
		x.id.Operation, x.id.Key, x.version)
	if attempt != nil {
		msg += fmt.Sprintf(" (this attempt: %v)", attempt)
	}
	return fmt.Errorf("%w: %s", runtime.ErrLeaseLost, msg)
}

// write runs a write of the record outside the caller's transaction, on a
// context the caller cannot cancel, retrying transient errors until the
// completion timeout.
func (x *txCall) write(ctx context.Context, release bool, f func(context.Context) error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.rt.CompletionTimeout())
	defer cancel()
	backoff := 10 * time.Millisecond
	for tries := 1; ; tries++ {
		err := f(wctx)
		if release && tries > 1 && errors.Is(err, runtime.ErrLeaseLost) {
			return nil // an earlier try deleted it and its reply was lost
		}
		if err == nil || errors.Is(err, runtime.ErrLeaseLost) || errors.Is(err, runtime.ErrTooLarge) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// release frees the claim after an effect that did nothing (its writes
// were rolled back), so that a retry runs it.
func (x *txCall) release(ctx context.Context) error {
	err := x.write(ctx, true, func(wctx context.Context) error {
		return x.s.Release(wctx, runtime.ReleaseParams{ID: x.id, State: runtime.StateProcessing, Owner: x.rt.Owner(), Version: x.version})
	})
	if err != nil && !errors.Is(err, runtime.ErrLeaseLost) {
		return fmt.Errorf("pgstore: %s %q: releasing the claim (it stays until its lease expires): %w", x.id.Operation, x.id.Key, err)
	}
	return nil
}

// fail records the permanent failure cause as FAILED, committed on its own,
// after the effect's writes were rolled back, and returns the error for the
// caller: cause when it was recorded.
func (x *txCall) fail(ctx context.Context, cause error, ttl time.Duration) error {
	resp, note := x.s.fitFailure(x.id, cause)
	tp := runtime.TransitionParams{ID: x.id, From: runtime.StateProcessing, Owner: x.rt.Owner(), Version: x.version,
		To: runtime.StateFailed, TTL: ttl, Response: resp, Note: note,
		Token: fmt.Sprintf("%s#dotx-failed-%d", x.rt.Owner(), x.version)}
	err := x.write(ctx, false, func(wctx context.Context) error {
		_, err := x.s.transition(wctx, x.s.q, tp)
		return err
	})
	switch {
	case err == nil:
		return cause
	case errors.Is(err, runtime.ErrLeaseLost):
		return x.lostErr(cause)
	}
	// Quoted, not wrapped: duplicates are not told this failure, so the
	// caller must not be told it as the outcome either.
	return fmt.Errorf("pgstore: %s %q: the effect failed permanently (%v) but recording it failed; its writes were rolled back and the claim stays until its lease expires: %w",
		x.id.Operation, x.id.Key, cause, err)
}

// fitFailure encodes cause as a FAILED record's response within the record
// limit, by the runtime's size rule: the Detailer payload is left out
// first, then the message is cut, then left out; note says what was.
func (s *Store) fitFailure(id runtime.Identity, cause error) (resp []byte, note string) {
	resp = runtime.EncodeFailure(cause)
	if len(resp) <= s.maxBytes {
		return resp, ""
	}
	fe, err := runtime.DecodeFailure(id, resp)
	if err != nil { // EncodeFailure's output always decodes
		return []byte("{}"), "failure not stored: " + err.Error()
	}
	f := storedFailure{code: fe.Code, msg: fe.Message}
	steps := []struct {
		shrink func()
		what   string
	}{
		{func() {}, fmt.Sprintf("failure detail not stored (%d bytes)", len(fe.Detail))},
		{func() { f.msg = cut(f.msg, 256) }, fmt.Sprintf("failure message cut from %d bytes", len(fe.Message))},
		{func() { f.msg = "" }, fmt.Sprintf("failure message not stored (%d bytes)", len(fe.Message))},
		{func() { f.code = cut(f.code, 256) }, "failure code cut"},
	}
	var left []string
	for _, st := range steps {
		st.shrink()
		left = append(left, st.what)
		resp = runtime.EncodeFailure(f)
		if len(resp) <= s.maxBytes {
			return resp, strings.Join(left, "; ") + " (the store refused the failure as too large)"
		}
	}
	return []byte("{}"), "failure not stored (the store refused it as too large)"
}

// storedFailure is a failure rebuilt from its stored parts, to encode
// again smaller.
type storedFailure struct{ code, msg string }

func (f storedFailure) Error() string     { return f.msg }
func (f storedFailure) ErrorCode() string { return f.code }

// cut shortens s to at most n bytes of valid UTF-8, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return string(bytes.ToValidUTF8([]byte(s[:n]), nil)) + "…"
}
