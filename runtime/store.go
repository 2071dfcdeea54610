package runtime

import (
	"context"
	"time"
)

// State is the state of an idempotency record.
type State string

// The record states. A record that does not exist is "absent".
const (
	// StateProcessing: claimed by an owner whose lease runs until
	// LeaseExpiresAt; the effect is (or was, if the lease expired) running.
	StateProcessing State = "PROCESSING"
	// StateSuccess: the effect happened; Response holds the encoded response.
	StateSuccess State = "SUCCESS"
	// StateFailed: the effect failed permanently; Response holds the encoded
	// failure.
	StateFailed State = "FAILED"
	// StateUnknown: the effect may or may not have happened. Not final: the
	// record is converged to SUCCESS or FAILED by a query. While a worker
	// converges it, Owner and LeaseExpiresAt are set.
	StateUnknown State = "UNKNOWN"
)

// Valid reports whether s is one of the four states.
func (s State) Valid() bool {
	switch s {
	case StateProcessing, StateSuccess, StateFailed, StateUnknown:
		return true
	}
	return false
}

// Final reports whether s is SUCCESS or FAILED.
func (s State) Final() bool { return s == StateSuccess || s == StateFailed }

// Identity is the primary key of a record: a key is only ever compared with
// keys of the same scope and operation.
type Identity struct {
	// Scope is who the key belongs to (tenant or principal); "" is the
	// unscoped namespace.
	Scope string
	// Operation is what the key is for, "Service.Method" by convention.
	Operation string
	// Key is the client-supplied idempotency key.
	Key string
}

// Record is one idempotency record as a store holds it.
type Record struct {
	ID          Identity
	Fingerprint []byte
	State       State
	// Owner is the worker holding the lease ("" when none).
	Owner string
	// Version increases on every transition (claim, takeover, completion);
	// it is the fencing token handed to the effect. Lease renewals keep it.
	// Stores draw versions from a store-wide counter, so a version never
	// repeats for an identity: not after a release, a sweep or a TTL
	// replacement either, so no stale attempt of an earlier life of the
	// record can match a compare-and-set of a later one.
	Version int64
	// LeaseExpiresAt is when the owner's lease ends, by the store's clock;
	// zero when no lease is held.
	LeaseExpiresAt time.Time
	// ExpiresAt is when a finished record may be swept, by the store's
	// clock; zero for PROCESSING and UNKNOWN records, which never expire.
	ExpiresAt time.Time
	// Request is the encoded request, kept so that a reconciler that never
	// saw the call can ask the operation's query function about it.
	Request []byte
	// Response is the encoded response (SUCCESS) or failure (FAILED).
	Response []byte
	// ResponseOmitted marks a SUCCESS whose response was not stored (over
	// the store's limit, or not encodable): the effect happened, and
	// duplicates get [ErrNotReplayable].
	ResponseOmitted bool
	// Note is free text about the last transition: why the response was
	// omitted, or an operator's reason for resolving the record by hand.
	Note string
	// Token is the token of the transition that wrote the record, or ""
	// when its last write was a claim or an acquisition (see
	// [TransitionParams.Token]).
	Token string
	// Takeovers counts how often an expired PROCESSING lease was taken over
	// since the record was created: when it is above zero an earlier owner
	// may have run the effect.
	Takeovers int32
	// Attempts counts reconciliation attempts on an UNKNOWN record: the
	// reconciler's acquisitions ([Store.AcquirePending]) since the effect
	// last ran. A Transition to PROCESSING (the effect run again, after a
	// query found it did not happen) sets it back to 0.
	Attempts  int32
	CreatedAt time.Time
	UpdatedAt time.Time
	// StoreNow is the store's clock when the record was read. It is not
	// persisted; the runtime compares leases against it, never against the
	// application's clock.
	StoreNow time.Time
}

// LeaseLive reports whether the lease is held at the store time of the read.
func (r *Record) LeaseLive() bool {
	return !r.LeaseExpiresAt.IsZero() && r.LeaseExpiresAt.After(r.StoreNow)
}

// ClaimParams describe an atomic claim.
type ClaimParams struct {
	ID          Identity
	Fingerprint []byte
	Request     []byte
	Owner       string
	Lease       time.Duration
	// AcquireUnknown also acquires an UNKNOWN record with the same
	// fingerprint whose reconciliation lease is free: the record stays
	// UNKNOWN, gets Owner, a lease and a new version. Attempts, which count
	// the reconciler's acquisitions only, is unchanged. Callers set it when
	// they can ask the operation's query function.
	AcquireUnknown bool
	// IfVersion, when not 0, makes the claim take an existing record (over
	// an expired lease, with AcquireUnknown, or replacing a finished record
	// past its TTL) only while it is at this version: a record changed
	// since the caller read it (another worker took it over, ran the effect
	// and left it UNKNOWN) is returned untouched, Claimed false. With no
	// record the claim creates one, as without it. [Resolve] sets it to the
	// version it decided on.
	IfVersion int64
}

// ClaimResult is what a claim found or did.
type ClaimResult struct {
	// Claimed reports that this owner now holds the record: a new PROCESSING
	// record, an expired PROCESSING record taken over (Record.Takeovers > 0)
	// or, with AcquireUnknown, an UNKNOWN record (Record.State is UNKNOWN).
	Claimed bool
	// Record is the record after the claim: the caller's when Claimed, the
	// existing one otherwise.
	Record Record
}

// TransitionParams describe a compare-and-set from (From, Owner, Version).
type TransitionParams struct {
	ID      Identity
	From    State
	Owner   string
	Version int64
	To      State
	// NewOwner is the owner after the transition ("" clears it).
	NewOwner string
	// Lease sets LeaseExpiresAt to store now + Lease when positive, and
	// clears it otherwise. For UNKNOWN it is the hold-off before the record
	// may be acquired again.
	Lease time.Duration
	// TTL sets ExpiresAt to store now + TTL for SUCCESS and FAILED; it is
	// ignored (ExpiresAt cleared) for PROCESSING and UNKNOWN.
	TTL time.Duration
	// Response is stored for SUCCESS and FAILED (nil keeps none).
	Response []byte
	// ResponseOmitted and Note are stored with the record (see [Record]);
	// a transition clears what it does not set.
	ResponseOmitted bool
	Note            string
	// Token, when not empty, makes the write recognisable: it is stored
	// with the record, and a Transition whose compare-and-set fails while
	// the record still carries the same Token (no write changed the version
	// since) returns the record's version instead of [ErrLeaseLost]. The
	// runtime sets a fresh token per outcome, one no other runtime makes
	// (see [WithOwner]), and keeps it across retries, so
	// a completion whose reply was lost, retried, reports its own write.
	// Every other version-changing write clears it.
	Token string
}

// RenewParams extend the lease of (State, Owner, Version).
type RenewParams struct {
	ID      Identity
	State   State
	Owner   string
	Version int64
	Lease   time.Duration
}

// ReleaseParams delete the record held as (State, Owner, Version).
type ReleaseParams struct {
	ID      Identity
	State   State
	Owner   string
	Version int64
}

// AcquireParams select records for a reconciler.
type AcquireParams struct {
	Owner string
	Lease time.Duration
	// Limit is the most records acquired in one call.
	Limit int
	// MaxAttempts skips UNKNOWN records with this many attempts or more
	// (0: no limit).
	MaxAttempts int32
	// Operations, when not empty, restricts acquisition to records of these
	// operations (a reconciler takes only what it can query).
	Operations []string
}

// Store keeps idempotency records. Implementations must make every method
// atomic with respect to the others and decide leases and expiry with their
// own clock. Methods that compare-and-set return [ErrLeaseLost] when the
// record is not in the expected (state, owner, version) and change nothing.
//
// Byte slices are immutable once handed over, both ways: a caller of a
// store never modifies the slices of the parameters it passed (Fingerprint,
// Request, Response) after the call, so a store may keep them rather than
// copy them, and never modifies the slices of the records it gets back, so
// a store may return slices it holds. The runtime keeps this rule; so must
// any other caller of a store.
type Store interface {
	// Claim atomically inserts a PROCESSING record, or takes over a
	// PROCESSING record with the same fingerprint whose lease expired, or
	// replaces a finished record whose TTL passed; otherwise it returns the
	// existing record unchanged. Never get-then-set. A store that finds the
	// record held where it can neither read its lease nor take it (a row
	// an open transaction locks) may return an error wrapping
	// [ErrInProgress]: the runtime then waits, up to MaxWait, as for a
	// live lease, and claims again.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
	// Get returns the record or [ErrNotFound].
	Get(ctx context.Context, id Identity) (Record, error)
	// Transition moves a record by compare-and-set and returns the new
	// version.
	Transition(ctx context.Context, p TransitionParams) (int64, error)
	// Renew extends a lease by compare-and-set and returns the new expiry;
	// the version is unchanged.
	Renew(ctx context.Context, p RenewParams) (time.Time, error)
	// Release deletes a record by compare-and-set.
	Release(ctx context.Context, p ReleaseParams) error
	// AcquirePending atomically acquires, for a reconciler, up to Limit
	// records that are UNKNOWN with a free lease or PROCESSING with an
	// expired lease. Each comes back as UNKNOWN owned by p.Owner with a new
	// lease and a new version, and Attempts increased by one. Two concurrent
	// callers never acquire the same record. When it fails part way (a
	// store that acquires bucket by bucket), it returns the records it
	// acquired together with the error: the caller owns and converges them.
	AcquirePending(ctx context.Context, p AcquireParams) ([]Record, error)
	// Sweep deletes up to limit SUCCESS and FAILED records whose ExpiresAt
	// passed, and returns how many it deleted. It never deletes PROCESSING or
	// UNKNOWN records.
	Sweep(ctx context.Context, limit int) (int, error)
}

// ListParams select records for an operator (see [Lister]).
type ListParams struct {
	// States to list; none lists UNKNOWN and PROCESSING records.
	States []State
	// Operation, when not empty, keeps to records of that operation.
	Operation string
	// Scope, when not nil, keeps to records of that scope ("" is the
	// unscoped namespace).
	Scope *string
	// MinAttempts keeps to records with at least this many reconciliation
	// attempts (a reconciler's MaxAttempts lists those it gave up on).
	MinAttempts int32
	// OlderThan keeps to records last written at least this long ago, by
	// the store's clock.
	OlderThan time.Duration
	// LeaseFree keeps to records no one holds: PROCESSING records whose
	// lease expired (their worker died) and UNKNOWN records not being
	// reconciled.
	LeaseFree bool
	// After is a cursor: only identities after it, in (Scope, Operation,
	// Key) byte order, are listed. Pass the last identity of a page.
	After *Identity
	// Limit is the most records returned (0: 100).
	Limit int
}

// Lister is implemented by stores that operators can search (all stores in
// this module). Records come in (Scope, Operation, Key) byte order.
type Lister interface {
	List(ctx context.Context, p ListParams) ([]Record, error)
}

// ListStates returns the states p lists.
func (p ListParams) ListStates() []State {
	if len(p.States) == 0 {
		return []State{StateUnknown, StateProcessing}
	}
	return p.States
}

// Matches reports whether r, read at r.StoreNow, is selected by p
// (ignoring After and Limit): for stores that filter in the application.
func (p ListParams) Matches(r *Record) bool {
	found := false
	for _, s := range p.ListStates() {
		found = found || r.State == s
	}
	switch {
	case !found,
		p.Operation != "" && r.ID.Operation != p.Operation,
		p.Scope != nil && r.ID.Scope != *p.Scope,
		r.Attempts < p.MinAttempts,
		p.OlderThan > 0 && r.UpdatedAt.After(r.StoreNow.Add(-p.OlderThan)),
		p.LeaseFree && r.LeaseLive():
		return false
	}
	return true
}

// Less orders identities as [Lister] lists them.
func (id Identity) Less(o Identity) bool {
	if id.Scope != o.Scope {
		return id.Scope < o.Scope
	}
	if id.Operation != o.Operation {
		return id.Operation < o.Operation
	}
	return id.Key < o.Key
}
