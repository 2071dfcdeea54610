// Package pgstore is a PostgreSQL [runtime.Store] on pgx/v5.
//
// Records live in one table, idem_records (see [Migrate] and the SQL in
// the queries package, compiled by sqlc). Every operation is one statement
// that runs in its own implicit transaction: a claim commits PROCESSING
// before the effect runs, and no transaction is ever held open across the
// effect. Leases and expiry are compared with the database's now().
//
// Round trips: the happy path of [runtime.Do] is two statements (claim,
// complete) and a replay is one (the claim returns the finished record).
package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/queries"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// DefaultMaxRecordBytes is the default limit on a stored request or response.
const DefaultMaxRecordBytes = 1 << 20

// Store is a [runtime.Store] on a pgx pool. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	q        *db.Queries
	maxBytes int
	group    *groupCommit // nil unless WithGroupCommit
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

// Beginner is what [Migrate] needs: a pool, a connection or a transaction.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrateLock is the advisory lock key that serializes concurrent Migrate
// calls (CREATE ... IF NOT EXISTS alone races on the catalog).
const migrateLock = 0x1de3_5c4e_3a11_0001

// Migrate creates the record table and its indexes if they do not exist, in
// one transaction under an advisory lock, so concurrent starts are safe. It is
// safe to run on every start; to manage the schema with a migration tool
// instead, use [queries.Schema] (or `idemgen schema`).
func Migrate(ctx context.Context, conn Beginner) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, queries.Schema); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}

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

// Claim implements [runtime.Store] in one statement.
func (s *Store) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if err := s.checkSize("request", p.Request); err != nil {
		return runtime.ClaimResult{}, err
	}
	return s.claim(ctx, s.q, p)
}

// claim runs the claim on q (the pool, or a transaction). The claim
// statement inserts or returns the existing record without locking it; only
// when that record may be taken (see [takeable]) does a second statement
// take it by compare-and-set on the version read.
func (s *Store) claim(ctx context.Context, q *db.Queries, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	return s.claimWith(ctx, q, p, q.ClaimExisting)
}

// claimWith is claim with take running the takeover statement.
func (s *Store) claimWith(ctx context.Context, q *db.Queries, p runtime.ClaimParams,
	take func(context.Context, db.ClaimExistingParams) ([]db.ClaimExistingRow, error)) (runtime.ClaimResult, error) {
	arg := db.ClaimParams{
		Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		Fingerprint: p.Fingerprint, Owner: p.Owner, Lease: interval(p.Lease), Request: p.Request,
	}
	// No row comes back only when a concurrent claim committed between the
	// snapshot of the statement and its insert, and the compare-and-set
	// finds nothing when another writer moved the record first: the next
	// run sees what they did.
	for range 10 {
		rows, err := s.claimRows(ctx, q, arg)
		if err != nil {
			return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: %w", err)
		}
		if len(rows) == 0 {
			continue
		}
		r := rows[0]
		rec := toRecord(db.GetRow{
			Scope: r.Scope, Operation: r.Operation, Key: r.Key, Fingerprint: r.Fingerprint,
			State: r.State, Owner: r.Owner, Version: r.Version, LeaseExpiresAt: r.LeaseExpiresAt,
			ExpiresAt: r.ExpiresAt, Request: r.Request, Response: r.Response, Takeovers: r.Takeovers,
			Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Token: r.Token,
			Note: r.Note, ResponseOmitted: r.ResponseOmitted, StoreNow: r.StoreNow,
		})
		if r.Claimed || !takeable(&rec, p) {
			return runtime.ClaimResult{Claimed: r.Claimed, Record: rec}, nil
		}
		taken, err := take(ctx, db.ClaimExistingParams{
			Fingerprint: p.Fingerprint, Owner: p.Owner, Lease: interval(p.Lease), Request: p.Request,
			Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key, Version: rec.Version,
			AcquireUnknown: p.AcquireUnknown,
		})
		if err != nil {
			return runtime.ClaimResult{}, fmt.Errorf("pgstore: claim: taking over: %w", err)
		}
		if len(taken) == 1 {
			return runtime.ClaimResult{Claimed: true, Record: toRecord(db.GetRow(taken[0]))}, nil
		}
	}
	return runtime.ClaimResult{}, errors.New("pgstore: claim: the record changed under every one of 10 tries")
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
	r, err := s.q.Get(ctx, db.GetParams{Scope: id.Scope, Operation: id.Operation, Key: id.Key})
	if errors.Is(err, pgx.ErrNoRows) {
		return runtime.Record{}, runtime.ErrNotFound
	}
	if err != nil {
		return runtime.Record{}, fmt.Errorf("pgstore: get: %w", err)
	}
	return toRecord(r), nil
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
	vs, err := s.transitionRows(ctx, q, db.TransitionParams{
		ToState: string(p.To), NewOwner: p.NewOwner, Lease: interval(p.Lease), Ttl: interval(p.TTL),
		Response: p.Response, ResponseOmitted: p.ResponseOmitted, Note: p.Note, Token: p.Token,
		Scope: p.ID.Scope, Operation: p.ID.Operation, Key: p.ID.Key,
		FromState: string(p.From), Owner: p.Owner, Version: p.Version,
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: transition to %s: %w", p.To, err)
	}
	if len(vs) == 0 {
		return 0, runtime.ErrLeaseLost
	}
	return vs[0], nil
}

// Renew implements [runtime.Store].
func (s *Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
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
