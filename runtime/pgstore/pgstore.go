// Package pgstore is a PostgreSQL [runtime.Store] on pgx/v5.
//
// Records live in one table, idem_records (see [Migrate] and the SQL in
// the queries package, compiled by sqlc). Every statement runs in its own
// implicit transaction and is atomic on its own: a claim commits PROCESSING
// before the effect runs, and no transaction is ever held open across the
// effect. Leases and expiry are compared with the database's clock
// (clock_timestamp()).
//
// Round trips: the happy path of [runtime.Do] is two statements (an INSERT,
// the completion's UPDATE) and a replay is one (a SELECT by primary key):
// a store reads first while its recent claims found records, and inserts
// first otherwise (see [Store.Claim]).
//
// A record's note (an error quoted, a resolution's reason) is stored as
// text: bytes that are not UTF-8, and NUL, are replaced by U+FFFD, where
// the memory store and Redis keep them as written.
package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/claimorder"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/utf8text"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// DefaultMaxRecordBytes is the default limit on a stored request or response.
const DefaultMaxRecordBytes = 1 << 20

// Store is a [runtime.Store] on a pgx pool. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	q        *db.Queries
	maxBytes int
	group    *groupCommit     // nil unless WithGroupCommit
	order    claimorder.Guess // which statement a claim sends first
	// txClaims holds the claims DoTx made for the transaction each
	// connection runs (see tx.go).
	txClaims txClaims

	// beforeSuccess, when set (tests only), runs in DoTx after the effect
	// returned and before SUCCESS is written in the caller's transaction.
	beforeSuccess func()
	// renewHook, when set (tests only), runs Renew's work (renew) as it
	// decides: late, never, or with its reply held back.
	renewHook func(ctx context.Context, renew func() (time.Time, error)) (time.Time, error)
	// beforeTakeover, when set (tests only), runs in Claim between the
	// read that found a record to take over and the takeover's
	// compare-and-set.
	beforeTakeover func()
	// afterReadMiss, when set (tests only), runs in Claim between a read
	// that found no record and the insert that follows it.
	afterReadMiss func()
}

// Option configures a [Store].
type Option func(*Store)

// WithMaxRecordBytes limits the size of a stored request or response; larger
// ones are refused with [runtime.ErrTooLarge] (default 1 MiB).
func WithMaxRecordBytes(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

// New returns a store on pool. The table must exist: see [Migrate].
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, q: db.New(pool), maxBytes: DefaultMaxRecordBytes}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ runtime.Store = (*Store)(nil)

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

func ts(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func toRecord(r db.GetRow) runtime.Record {
	return runtime.Record{
		ID:              runtime.Identity{Scope: r.Scope, Operation: r.Operation, Key: r.Key},
		Fingerprint:     r.Fingerprint,
		State:           runtime.State(r.State),
		Owner:           r.Owner,
		Version:         r.Version,
		LeaseExpiresAt:  ts(r.LeaseExpiresAt),
		ExpiresAt:       ts(r.ExpiresAt),
		Request:         r.Request,
		Response:        r.Response,
		ResponseOmitted: r.ResponseOmitted,
		Note:            r.Note,
		Token:           r.Token,
		Takeovers:       r.Takeovers,
		Attempts:        r.Attempts,
		CreatedAt:       ts(r.CreatedAt),
		UpdatedAt:       ts(r.UpdatedAt),
		StoreNow:        ts(r.StoreNow),
	}
}

func (s *Store) checkSize(what string, b []byte) error {
	if len(b) > s.maxBytes {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", runtime.ErrTooLarge, what, len(b), s.maxBytes)
	}
	return nil
}

// Claim implements [runtime.Store]. A first call is one INSERT, a replay one
// SELECT by primary key (which takes no lock), a takeover one more
// compare-and-set; each statement is atomic, and none holds a transaction
// open between them. Which of the INSERT and the SELECT goes first is
// guessed from the store's recent claims: while some found a record it
// reads first, otherwise it inserts first; a wrong guess costs one more
// statement.
//
// A takeover of an expired PROCESSING record does not wait on a lock of
// the record's row: it reads the record again after a pause (5 ms,
// doubling, up to 100 ms), and when another transaction still holds the
// row after the last of ten tries (0.66 s of pauses: a [DoTx] that
// recorded the outcome in its caller's transaction, not yet committed), the
// claim fails with [runtime.ErrInProgress].
func (s *Store) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if err := s.checkSize("request", p.Request); err != nil {
		return runtime.ClaimResult{}, err
	}
	return s.claim(ctx, s.q, p)
}

// claim runs the claim on q (the pool, or a transaction).
//
// A claim is at most three steps, each atomic on its own: the insert of an
// absent record (an INSERT: the primary key lets one win), the read of
// an existing one (a SELECT by primary key, no lock), and the takeover of a
// record that may be taken (see [takeable]), by compare-and-set on the
// version read. Which of the insert and the read runs first is a guess (see
// [claimorder.Guess]): a first call inserts at once and a replay is one SELECT,
// and a wrong guess costs one more statement, never a wrong answer. In
// group-commit mode the batched claim statement, which inserts or returns
// the existing record, comes first.
func (s *Store) claim(ctx context.Context, q *db.Queries, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	grouped := s.group != nil && q == s.q
	readFirst := !grouped && s.order.ReadFirst()
	// Each step that finds nothing to do lost a race: the insert to a
	// concurrent claim, the compare-and-set to another writer, the read to
	// a release. The next round sees what they did.
	held := 0 // tries in a row that found the record's row held
	for try := range 10 {
		var rec runtime.Record
		if try > 0 || readFirst {
			var err error
			rec, err = s.read(ctx, q, p.ID)
			if err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
			}
			if err != nil {
				if s.afterReadMiss != nil {
					s.afterReadMiss()
				}
				res, ok, err := s.insert(ctx, q, p)
				if err != nil {
					return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
				}
				if !ok {
					continue // read it
				}
				if res.Claimed {
					s.order.Created()
					return res, nil
				}
				// The batched statement returned a record a concurrent
				// claim inserted after the read: judge it as read.
				rec = res.Record
			}
		} else {
			res, ok, err := s.insert(ctx, q, p)
			if err != nil {
				return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
			}
			if ok && res.Claimed {
				s.order.Created()
				return res, nil
			}
			if !ok {
				continue // read it
			}
			rec = res.Record // the batched statement returned the existing record
		}
		s.order.Found()
		if !takeable(&rec, p) || (p.IfVersion != 0 && rec.Version != p.IfVersion) {
			// Not to be taken; or not at the version the caller decided
			// on (ClaimParams.IfVersion): ClaimExisting's compare-and-set on
			// the version read makes the check exact.
			return runtime.ClaimResult{Record: rec}, nil
		}
		if s.beforeTakeover != nil {
			s.beforeTakeover()
		}
		taken, err := q.ClaimExisting(ctx, db.ClaimExistingParams{
			Fingerprint: p.Fingerprint, Owner: p.Owner, Lease: interval(p.Lease), Request: p.Request,
			Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key, Version: rec.Version,
			AcquireUnknown: p.AcquireUnknown, Nowait: rec.State == runtime.StateProcessing,
		})
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
			// Another transaction holds the expired PROCESSING record's
			// row: for a moment (a takeover, a renewal, a reconciler), or
			// for as long as it stays open (a DoTx that recorded the
			// outcome and has not committed). Read it again after a pause;
			// past the last try, the call is in progress.
			held++
			if err := sleepCtx(ctx, min(heldPause<<(held-1), 100*time.Millisecond)); err != nil {
				return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
			}
			continue
		}
		held = 0
		if err != nil {
			return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: taking over: %w", err)
		}
		if len(taken) == 1 {
			return runtime.ClaimResult{Claimed: true, Record: toRecord(db.GetRow(taken[0]))}, nil
		}
	}
	if held > 0 {
		return runtime.ClaimResult{}, fmt.Errorf("%w: pgstore: claim: %s %q: another transaction holds the record (a DoTx not yet committed?)",
			runtime.ErrInProgress, p.ID.Operation, p.ID.Key)
	}
	return runtime.ClaimResult{}, errors.New("pgstore: claim: the record changed under every one of 10 tries")
}

// read returns the record of id, or [runtime.ErrNotFound].
func (s *Store) read(ctx context.Context, q *db.Queries, id runtime.Identity) (runtime.Record, error) {
	r, err := q.Get(ctx, db.GetParams{Scope: id.Scope, Operation: id.Operation, Key: id.Key})
	if errors.Is(err, pgx.ErrNoRows) {
		return runtime.Record{}, runtime.ErrNotFound
	}
	if err != nil {
		return runtime.Record{}, err
	}
	rec := toRecord(r)
	if rec.ID != id {
		return runtime.Record{}, fmt.Errorf("read %s %q: the server answered with the record of %s %q (scope %q): a connection out of step",
			id.Operation, id.Key, rec.ID.Operation, rec.ID.Key, rec.ID.Scope)
	}
	return rec, nil
}

// SQLSTATEs the store handles.
const (
	uniqueViolation  = "23505"
	lockNotAvailable = "55P03"
	// inFailedTransaction: a statement in a transaction that an error aborted.
	inFailedTransaction = "25P02"
)

// heldPause is the first pause of a claim that found the record's row held
// by another transaction (see [Store.Claim]); it doubles, up to 100 ms.
const heldPause = 5 * time.Millisecond

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// insert inserts a new PROCESSING record for p. ok is false when a record
// exists (it was inserted first by a concurrent claim, or long before):
// the caller reads it. In group-commit mode the batched statement returns
// the existing record instead (ok, not Claimed).
func (s *Store) insert(ctx context.Context, q *db.Queries, p runtime.ClaimParams) (res runtime.ClaimResult, ok bool, err error) {
	arg := db.ClaimParams{
		Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		Fingerprint: p.Fingerprint, Owner: p.Owner, Lease: interval(p.Lease), Request: p.Request,
	}
	if s.group != nil && q == s.q {
		// No row: a concurrent claim committed after the statement's
		// snapshot.
		rows, err := s.claimRows(ctx, q, arg)
		if err != nil || len(rows) == 0 {
			return res, false, err
		}
		r := rows[0]
		return runtime.ClaimResult{Claimed: r.Claimed, Record: toRecord(db.GetRow{
			Scope: r.Scope, Operation: r.Operation, Key: r.Key, Fingerprint: r.Fingerprint,
			State: r.State, Owner: r.Owner, Version: r.Version, LeaseExpiresAt: r.LeaseExpiresAt,
			ExpiresAt: r.ExpiresAt, Request: r.Request, Response: r.Response, Takeovers: r.Takeovers,
			Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Token: r.Token,
			Note: r.Note, ResponseOmitted: r.ResponseOmitted, StoreNow: r.StoreNow,
		})}, true, nil
	}
	r, err := q.ClaimInsert(ctx, db.ClaimInsertParams(arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return res, false, nil
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return res, false, nil // a concurrent claim inserted it first
	}
	if err != nil {
		return res, false, err
	}
	now := ts(r.CreatedAt)
	return runtime.ClaimResult{Claimed: true, Record: runtime.Record{
		ID: p.ID, Fingerprint: p.Fingerprint, State: runtime.StateProcessing, Owner: p.Owner, Version: r.Version,
		LeaseExpiresAt: ts(r.LeaseExpiresAt), Request: p.Request,
		CreatedAt: now, UpdatedAt: now, StoreNow: now,
	}}, true, nil
}

// takeable reports whether a claim may take the existing record rec, read
// at rec.StoreNow: the conditions ClaimExisting checks again atomically.
func takeable(rec *runtime.Record, p runtime.ClaimParams) bool {
	expired := func(t time.Time) bool { return !t.IsZero() && !t.After(rec.StoreNow) }
	same := bytes.Equal(rec.Fingerprint, p.Fingerprint)
	switch rec.State {
	case runtime.StateProcessing:
		return same && expired(rec.LeaseExpiresAt)
	case runtime.StateSuccess, runtime.StateFailed:
		return expired(rec.ExpiresAt)
	case runtime.StateUnknown:
		return p.AcquireUnknown && same && !rec.LeaseLive()
	}
	return false
}

// Get implements [runtime.Store].
func (s *Store) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	rec, err := s.read(ctx, s.q, id)
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return runtime.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	return rec, err
}

// Transition implements [runtime.Store].
func (s *Store) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if err := s.checkSize("response", p.Response); err != nil {
		return 0, err
	}
	return s.transition(ctx, s.q, p)
}

// transition runs a Transition on q (the pool, or a transaction).
func (s *Store) transition(ctx context.Context, q *db.Queries, p runtime.TransitionParams) (int64, error) {
	arg := db.TransitionParams{
		ToState: string(p.To), NewOwner: p.NewOwner, Lease: interval(p.Lease), Ttl: interval(p.TTL),
		Response: p.Response, ResponseOmitted: p.ResponseOmitted, Note: pgText(p.Note), Token: p.Token,
		Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		FromState: string(p.From), Owner: p.Owner, Version: p.Version,
	}
	var v int64
	var err error
	if s.group != nil && q == s.q {
		var vs []int64
		vs, err = s.transitionRows(ctx, q, arg)
		switch {
		case err != nil:
			return 0, fmt.Errorf("pgstore: transition to %s: %w", p.To, err)
		case len(vs) > 0:
			return vs[0], nil
		}
		// The batch's own token lookup read the statement's snapshot: an
		// earlier try of this write that committed while the batch waited
		// on the row (its reply lost, the retry queued behind it) is not
		// in it. Ask again below, in a statement of its own.
		err = pgx.ErrNoRows
	} else {
		v, err = q.TransitionCAS(ctx, db.TransitionCASParams(arg))
	}
	if errors.Is(err, pgx.ErrNoRows) && p.Token != "" {
		// Not applied now: applied by an earlier try whose reply was lost?
		v, err = q.TransitionApplied(ctx, db.TransitionAppliedParams{Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key, Token: p.Token})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, runtime.ErrLeaseLost
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: transition to %s: %w", p.To, err)
	}
	return v, nil
}

// Renew implements [runtime.Store].
func (s *Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.renewHook != nil {
		return s.renewHook(ctx, func() (time.Time, error) { return s.renew(ctx, p) })
	}
	return s.renew(ctx, p)
}

func (s *Store) renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	until, err := s.q.Renew(ctx, db.RenewParams{
		Lease: interval(p.Lease), Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		State: string(p.State), Owner: p.Owner, Version: p.Version,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, runtime.ErrLeaseLost
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("pgstore: renew: %w", err)
	}
	return ts(until), nil
}

// Release implements [runtime.Store].
func (s *Store) Release(ctx context.Context, p runtime.ReleaseParams) error {
	n, err := s.q.Release(ctx, db.ReleaseParams{
		Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		State: string(p.State), Owner: p.Owner, Version: p.Version,
	})
	if err != nil {
		return fmt.Errorf("pgstore: release: %w", err)
	}
	if n == 0 {
		return runtime.ErrLeaseLost
	}
	return nil
}

// AcquirePending implements [runtime.Store] with FOR UPDATE SKIP LOCKED, so
// concurrent reconcilers take disjoint batches.
func (s *Store) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	ops := p.Operations
	if ops == nil {
		ops = []string{}
	}
	rows, err := s.q.AcquirePending(ctx, db.AcquirePendingParams{
		Owner: p.Owner, Lease: interval(p.Lease), MaxAttempts: p.MaxAttempts, MaxRecords: int32(min(limit, 1<<30)),
		Operations: ops,
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: acquire pending: %w", err)
	}
	out := make([]runtime.Record, len(rows))
	for i, r := range rows {
		out[i] = toRecord(db.GetRow(r))
	}
	return out, nil
}

// Sweep implements [runtime.Store]: one bounded DELETE walking the expiry
// index.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	n, err := s.q.Sweep(ctx, int32(min(limit, 1<<30)))
	if err != nil {
		return 0, fmt.Errorf("pgstore: sweep: %w", err)
	}
	return int(n), nil
}

// List implements [runtime.Lister].
func (s *Store) List(ctx context.Context, p runtime.ListParams) ([]runtime.Record, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	states := make([]string, 0, 4)
	for _, st := range p.ListStates() {
		states = append(states, string(st))
	}
	arg := db.ListParams{
		States: states, Operation: p.Operation, MinAttempts: p.MinAttempts, OlderThan: interval(max(p.OlderThan, 0)),
		LeaseFree: p.LeaseFree, MaxRecords: int32(min(limit, 1<<30)),
	}
	if p.Scope != nil {
		arg.ByScope, arg.Scope = true, *p.Scope
	}
	if p.After != nil {
		arg.AfterScope, arg.AfterOperation, arg.AfterKey = p.After.Scope, p.After.Operation, p.After.Key
	}
	rows, err := s.q.List(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	out := make([]runtime.Record, len(rows))
	for i, r := range rows {
		out[i] = toRecord(db.GetRow(r))
	}
	return out, nil
}

var _ runtime.Lister = (*Store)(nil)

// pgText returns s as a PostgreSQL text column takes it: valid UTF-8
// without NUL: each run of bytes that are not UTF-8, and each NUL,
// replaced by U+FFFD. A record's note quotes errors and a resolution's reason, which
// may hold any bytes (an encoding error naming a field with a NUL, a
// gateway's Latin-1 error page): refused by the server (SQLSTATE 22021),
// the write that records a call's outcome failed, the record stayed
// PROCESSING, and every duplicate after the lease ran the effect again
// (review r54).
func pgText(s string) string { return utf8text.Clean(s) }
