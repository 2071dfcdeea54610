package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// DoTx runs a local effect exactly once: the claim, the effect and the
// SUCCESS record are written inside tx, the caller's transaction, so they
// commit or roll back together and there is nothing to reconcile. rt's store
// must be a *Store on the same database.
//
// A concurrent duplicate blocks on the claim row until the first transaction
// ends (bounded by rt's MaxWait, as lock_timeout), then replays the response
// or, if the first rolled back, runs the effect itself; past the bound it gets
// [runtime.ErrInProgress]. When the effect fails, DoTx rolls back to its
// savepoint, so neither the record nor the effect's writes remain, and returns
// the error; the caller's transaction stays usable. A [runtime.Permanent]
// error is then recorded as FAILED in a separate short transaction, so
// duplicates replay it. Use READ COMMITTED (PostgreSQL's default): under
// REPEATABLE READ a duplicate fails with a serialization error instead of
// replaying.
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
	reqBytes, err := rt.Codec().Marshal(c.Request)
	if err != nil {
		return zero, fmt.Errorf("pgstore: %s: encoding request: %w", c.Operation, err)
	}
	if err := s.checkSize("request", reqBytes); err != nil {
		return zero, err
	}
	fp := c.Fingerprint
	if fp == nil {
		fp = runtime.Fingerprint(reqBytes)
	}
	ttl := c.TTL
	if ttl <= 0 {
		ttl = rt.TTL()
	}

	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return zero, fmt.Errorf("pgstore: %s %q: savepoint: %w", id.Operation, id.Key, err)
	}
	// The savepoint is released or rolled back on a context the caller
	// cannot cancel, bounded by the completion timeout: with the caller's
	// context, once done, pgx fails the statement unsent and marks the
	// savepoint closed, and the effect's writes and a PROCESSING claim would
	// stay in the caller's transaction, to be committed.
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
			return fmt.Errorf("%w: %s %q: rolling back to the savepoint left the effect's writes and the claim in the transaction: %w",
				ErrRollbackRequired, id.Operation, id.Key, err)
		}
		return nil
	}
	done := false
	defer func() {
		if !done { // a panic in the effect: roll back, then let it go on
			_ = finish(false)
		}
	}()
	fail := func(err error) (Resp, error) {
		done = true
		if rerr := finish(false); rerr != nil {
			return zero, errors.Join(rerr, err)
		}
		return zero, err
	}
	q := s.q.WithTx(sp)

	res, err := s.claimWithLockTimeout(ctx, sp, q, rt.MaxWait(), runtime.ClaimParams{
		ID: id, Fingerprint: fp, Request: reqBytes, Owner: rt.Owner(), Lease: rt.Lease(),
	})
	if err != nil {
		return fail(err)
	}
	if !res.Claimed {
		done = true
		if err := finish(true); err != nil {
			return zero, err
		}
		return runtime.Replay[Resp](rt, res.Record, fp)
	}
	rec := res.Record
	effCtx := runtime.WithAttempt(ctx, runtime.Attempt{
		ID: id, FencingToken: rec.Version, DownstreamKey: runtime.DownstreamKey(id), TakenOver: rec.Takeovers > 0,
	})
	resp, err := c.Effect(effCtx, sp, c.Request)
	if err != nil {
		resp, err := fail(err)
		if errors.Is(err, ErrRollbackRequired) {
			return resp, err
		}
		if errors.Is(err, runtime.ErrPermanent) {
			if ferr := s.recordFailure(ctx, rt, id, fp, reqBytes, err, ttl); ferr != nil {
				return zero, errors.Join(err, ferr)
			}
		}
		return resp, err
	}
	body, err := rt.Codec().Marshal(resp)
	if err != nil {
		return fail(fmt.Errorf("pgstore: %s %q: encoding response: %w", id.Operation, id.Key, err))
	}
	if err := s.checkSize("response", body); err != nil {
		return fail(fmt.Errorf("pgstore: %s %q: the effect's writes were rolled back: %w", id.Operation, id.Key, err))
	}
	if _, err := s.transition(ctx, q, runtime.TransitionParams{
		ID: id, From: runtime.StateProcessing, Owner: rt.Owner(), Version: rec.Version,
		To: runtime.StateSuccess, TTL: ttl, Response: body,
	}); err != nil {
		return fail(fmt.Errorf("pgstore: %s %q: recording success: %w", id.Operation, id.Key, err))
	}
	done = true
	if err := finish(true); err != nil {
		return zero, err
	}
	return resp, nil
}

// claimWithLockTimeout claims inside the transaction with lock_timeout set to
// maxWait for the claim statement only, so a duplicate waits on the first
// transaction's row at most that long.
func (s *Store) claimWithLockTimeout(ctx context.Context, tx pgx.Tx, q *db.Queries, maxWait time.Duration, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	ms := max(maxWait.Milliseconds(), 1)
	var prev string
	if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)",
		strconv.FormatInt(ms, 10)+"ms").Scan(&prev, new(string)); err != nil {
		return runtime.ClaimResult{}, fmt.Errorf("pgstore: %s %q: setting lock_timeout: %w", p.ID.Operation, p.ID.Key, err)
	}
	res, err := s.claim(ctx, q, p)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return res, fmt.Errorf("%w: %s %q: another transaction holds it (waited %v)", runtime.ErrInProgress, p.ID.Operation, p.ID.Key, maxWait)
		}
		return res, err
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", prev); err != nil {
		return res, fmt.Errorf("pgstore: %s %q: restoring lock_timeout: %w", p.ID.Operation, p.ID.Key, err)
	}
	return res, nil
}

// recordFailure writes a FAILED record in its own short transaction, so
// that duplicates replay the permanent failure of a local effect whose
// writes were rolled back. It is bounded: the claim waits at most MaxWait
// for a duplicate's transaction (lock_timeout), and the whole at most the
// completion timeout, since the caller's own transaction may hold locks a
// duplicate waits on, a cycle across two connections that PostgreSQL cannot
// see. When the bound is hit the failure is not recorded and a retry runs
// the effect again (its writes were rolled back).
func (s *Store) recordFailure(ctx context.Context, rt *runtime.Runtime, id runtime.Identity, fp, req []byte, cause error, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.CompletionTimeout())
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		res, err := s.claimWithLockTimeout(ctx, tx, q, rt.MaxWait(), runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: rt.Owner(), Lease: rt.Lease()})
		if err != nil {
			return err
		}
		if !res.Claimed {
			return nil // a duplicate recorded an outcome meanwhile: keep it
		}
		_, err = s.transition(ctx, q, runtime.TransitionParams{
			ID: id, From: runtime.StateProcessing, Owner: rt.Owner(), Version: res.Record.Version,
			To: runtime.StateFailed, TTL: ttl, Response: runtime.EncodeFailure(cause),
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: recording the permanent failure (not recorded; a retry runs the effect again): %w", id.Operation, id.Key, err)
	}
	return nil
}
