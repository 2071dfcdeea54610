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
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }() // no-op once released
	q := s.q.WithTx(sp)

	res, err := claimWithLockTimeout(ctx, sp, q, rt.MaxWait(), runtime.ClaimParams{
		ID: id, Fingerprint: fp, Request: reqBytes, Owner: rt.Owner(), Lease: rt.Lease(),
	})
	if err != nil {
		return zero, err
	}
	if !res.Claimed {
		if err := sp.Commit(ctx); err != nil {
			return zero, fmt.Errorf("pgstore: %s %q: release savepoint: %w", id.Operation, id.Key, err)
		}
		return runtime.Replay[Resp](rt, res.Record, fp)
	}
	rec := res.Record
	effCtx := runtime.WithAttempt(ctx, runtime.Attempt{
		ID: id, FencingToken: rec.Version, DownstreamKey: runtime.DownstreamKey(id), TakenOver: rec.Takeovers > 0,
	})
	resp, err := runEffect(effCtx, sp, c)
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return zero, errors.Join(err, fmt.Errorf("pgstore: rollback to savepoint: %w", rerr))
		}
		if errors.Is(err, runtime.ErrPermanent) {
			if ferr := s.recordFailure(ctx, rt, id, fp, reqBytes, err, ttl); ferr != nil {
				return zero, errors.Join(err, ferr)
			}
		}
		return zero, err
	}
	body, err := rt.Codec().Marshal(resp)
	if err != nil {
		return zero, fmt.Errorf("pgstore: %s %q: encoding response: %w", id.Operation, id.Key, err)
	}
	if err := s.checkSize("response", body); err != nil {
		return zero, err
	}
	if _, err := q.Transition(ctx, db.TransitionParams{
		ToState: string(runtime.StateSuccess), Ttl: interval(ttl), Lease: interval(0), Response: body,
		Scope: id.Scope, Operation: id.Operation, Key: id.Key,
		FromState: string(runtime.StateProcessing), Owner: rt.Owner(), Version: rec.Version,
	}); err != nil {
		return zero, fmt.Errorf("pgstore: %s %q: recording success: %w", id.Operation, id.Key, err)
	}
	if err := sp.Commit(ctx); err != nil {
		return zero, fmt.Errorf("pgstore: %s %q: release savepoint: %w", id.Operation, id.Key, err)
	}
	return resp, nil
}

// runEffect runs the effect, turning a panic into a rollback before it
// propagates.
func runEffect[Req, Resp any](ctx context.Context, sp pgx.Tx, c TxCall[Req, Resp]) (Resp, error) {
	panicked := true
	defer func() {
		if panicked {
			_ = sp.Rollback(context.WithoutCancel(ctx))
		}
	}()
	resp, err := c.Effect(ctx, sp, c.Request)
	panicked = false
	return resp, err
}

// claimWithLockTimeout claims inside the transaction with lock_timeout set to
// maxWait for the claim statement only, so a duplicate waits on the first
// transaction's row at most that long.
func claimWithLockTimeout(ctx context.Context, tx pgx.Tx, q *db.Queries, maxWait time.Duration, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	ms := max(maxWait.Milliseconds(), 1)
	var prev string
	if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)",
		strconv.FormatInt(ms, 10)+"ms").Scan(&prev, new(string)); err != nil {
		return runtime.ClaimResult{}, fmt.Errorf("pgstore: %s %q: setting lock_timeout: %w", p.ID.Operation, p.ID.Key, err)
	}
	res, err := claim(ctx, q, p)
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
// writes were rolled back.
func (s *Store) recordFailure(ctx context.Context, rt *runtime.Runtime, id runtime.Identity, fp, req []byte, cause error, ttl time.Duration) error {
	ctx = context.WithoutCancel(ctx)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := s.q.WithTx(tx)
		res, err := claim(ctx, q, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: rt.Owner(), Lease: rt.Lease()})
		if err != nil {
			return err
		}
		if !res.Claimed {
			return nil // a duplicate recorded an outcome meanwhile: keep it
		}
		_, err = q.Transition(ctx, db.TransitionParams{
			ToState: string(runtime.StateFailed), Ttl: interval(ttl), Lease: interval(0), Response: runtime.EncodeFailure(cause),
			Scope: id.Scope, Operation: id.Operation, Key: id.Key,
			FromState: string(runtime.StateProcessing), Owner: rt.Owner(), Version: res.Record.Version,
		})
		if err != nil {
			return fmt.Errorf("pgstore: %s %q: recording failure: %w", id.Operation, id.Key, err)
		}
		return nil
	})
}
