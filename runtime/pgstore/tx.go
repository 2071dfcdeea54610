package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"weak"

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

// ErrEffectAborted is returned by [DoTx] when the effect returned success
// but a statement it ran in tx had failed, which aborts a PostgreSQL
// transaction (an error the effect did not return): the SUCCESS record
// cannot be written. DoTx rolls back to its savepoint, so the effect's
// writes are gone, the key is free again and the transaction is usable.
var ErrEffectAborted = errors.New("pgstore: a statement of the effect failed and aborted the transaction")

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
// DoTx runs the runtime's protocol ([runtime.DoLocal]), as [runtime.Do]
// does: the claim, the wait for a call in flight, replays, the lease rule
// and its renewals, the size rule. What is its own is the transaction. The
// claim is committed first, on its own (PROCESSING, with the runtime's
// lease, renewed while the effect runs), and names tx's transaction ID (the
// record's xact column), so that a duplicate (DoTx in another transaction,
// or [runtime.Do]) never runs the effect while this call's transaction is
// open: it waits up to its runtime's MaxWait (while this call's lease is
// live, or tx holds the record's row: see [Store.Claim]), then gets
// [runtime.ErrInProgress], and replays the outcome, whatever it turns out
// to be. The effect runs inside a savepoint, with the lease rule's promise:
// when its lease cannot be confirmed in time, its context is cancelled
// (cause [runtime.ErrLeaseLost]) before the lease can expire, and its
// writes are rolled back when it returns an error (an effect that returns
// success anyway, say with a statement that ended before the server got
// the cancel request, is recorded as [runtime.Do] records it: by the
// SUCCESS write's compare-and-set, which fails if another worker took
// over).
// SUCCESS is a compare-and-set from the claim,
// inside tx, so it commits with the effect's writes, and a worker that lost
// its lease meanwhile commits nothing. The effect's statements run on tx's
// connection: with pgx's default context handling, a context cancelled
// while a statement runs (the lease rule's, or the caller's own) closes
// that connection, so tx cannot commit and DoTx returns
// [ErrRollbackRequired] (wrapping [runtime.ErrLeaseLost] too when the
// lease rule stopped the effect); nothing of the effect commits, but the caller's
// own writes in tx are lost with it. To keep tx usable in that case, build
// the caller's connections with [pgconn.CancelRequestContextWatcherHandler]
// (pgconn.Config.BuildContextWatcherHandler), which cancels the statement
// on the server instead: the savepoint is then rolled back as above.
// From that write on, the record's
// row, locked by tx, holds duplicates off until tx ends (their claims do
// not wait on the lock: see [Store.Claim]). A second DoTx of the same
// identity in tx itself (a batch that carries one item twice) is not a
// duplicate in flight: it reads the record in tx, and replays the outcome
// tx holds (or gets [runtime.ErrKeyReused] for another request), at once
// within the first call's lease, after one claim's tries on the held row
// past it. A second call after tx rolled back a savepoint around the first
// (its outcome and effect gone) releases the first call's claim, which
// names tx, and runs the effect again at once; one from inside the first
// call's effect gets [runtime.ErrInProgress] at once. Either, with another
// request, gets [runtime.ErrKeyReused]: the key stays bound to the first. DoTx's own statements in tx (before the effect, and the
// savepoint's release or rollback after it) run on a context the caller
// cannot cancel: a cancellation never closes tx's connection there.
//
// When the effect fails, DoTx rolls back to its savepoint (the effect's
// writes are gone; the caller's transaction stays usable) and returns the
// error. A [runtime.Permanent] error is then recorded as FAILED (unless a
// timeout or a cancellation is in its tree, [runtime.Uncertain]: that is
// never a permanent failure), committed on its own, so it stands whether the caller commits or rolls back, and
// duplicates replay it; any other error releases the claim, so a retry runs
// the effect again. A response or failure over the store's record limit is
// recorded shortened, as the runtime's size rule says. The runtime's
// observer and logger see DoTx calls as they see [runtime.Do]'s.
//
// If the caller rolls its transaction back after DoTx succeeded, nothing
// remains of the effect: the claim, still PROCESSING but naming a
// transaction that has ended, is taken over at once by the next duplicate,
// which runs the effect (so is one whose transaction commits without the
// SUCCESS write, e.g. after rolling back a savepoint around DoTx); a
// reconciler that comes first deletes such a void claim, never makes it
// UNKNOWN, and so it does with a claim whose lease expired while the
// transaction, still open, holds no SUCCESS write for it. Every
// query of this package reads the xact column, which [Store.Migrate] adds
// to a table of an earlier version: run it before deploying.
//
// DoTx uses a second connection of the store's pool, one statement at a
// time, while the caller holds tx: when tx comes from the store's pool, size
// the pool for the transactions that call DoTx at once plus one connection
// each for their claims (up to twice their number), or give the store a
// pool of its own; a pool whose every connection is held by a transaction
// waiting in DoTx cannot make progress. tx must be READ COMMITTED (PostgreSQL's
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
	x := &txCall{s: s, rt: rt, tx: tx}
	return runtime.DoLocal(ctx, rt, runtime.Call[Req, Resp]{
		Operation: c.Operation, Key: c.Key, Request: c.Request, Fingerprint: c.Fingerprint, TTL: c.TTL,
		Effect: func(ctx context.Context, req Req) (Resp, error) { return c.Effect(ctx, x.sp, req) },
	}, x)
}

// txCall is what is DoTx's own in a call: the caller's transaction, the
// savepoint the effect runs in, and the writes of the record that go
// outside it. It implements [runtime.LocalReader].
type txCall struct {
	s       *Store
	rt      *runtime.Runtime
	tx      pgx.Tx // the caller's
	sp      pgx.Tx // the effect's savepoint, from Begin
	id      runtime.Identity
	version int64 // of the claim
	// succeeding is set by the first SUCCESS write (the size rule may
	// write a smaller one).
	succeeding bool
	// claim is the claim's entry in the store's txClaims, from Begin.
	claim *txClaim
}

// Begin checks the caller's transaction (READ COMMITTED), names it on the
// claim, committed on its own, and opens the effect's savepoint.
func (x *txCall) Begin(ctx context.Context, rec runtime.Record) error {
	x.id, x.version = rec.ID, rec.Version
	id := x.id
	// The caller's transaction: its ID names the claim (see markTx), and
	// its isolation level must be READ COMMITTED: under REPEATABLE READ or
	// SERIALIZABLE its snapshot (taken by now) predates the claim's
	// marking, and the SUCCESS write would fail after the effect ran. (A
	// replay reads nothing in it.)
	// Its statements in tx run on a context the caller cannot cancel
	// (bounded by the completion timeout): pgx closes the connection of a
	// statement whose context ends, and the caller's transaction with it,
	// before anything of DoTx's is in tx to roll back. A caller gone by
	// then finds the effect's context ended, and its savepoint rolled back.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.rt.CompletionTimeout())
	defer cancel()
	cur, err := x.s.q.WithTx(x.tx).CurrentXact(tctx)
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: reading the caller's transaction ID: %w", id.Operation, id.Key, err)
	}
	if cur.Isolation != "read committed" {
		return fmt.Errorf("%w: %s %q: this transaction is %s; the effect did not run",
			ErrNotReadCommitted, id.Operation, id.Key, strings.ToUpper(cur.Isolation))
	}
	if err := x.markTx(ctx, cur.Xact); err != nil {
		return err
	}
	sp, err := x.tx.Begin(tctx) // a savepoint
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: savepoint: %w", id.Operation, id.Key, err)
	}
	x.sp = sp
	x.claim = x.s.txClaims.add(x.tx.Conn(), cur.Xact, id, x.version)
	return nil
}

// Transition writes the SUCCESS record inside the savepoint. The claim's
// lease stays as it is: the write locks the record's row until the
// caller's transaction ends. A duplicate waits for that transaction while
// it is in progress (the row is held, or its lease is live), replays
// SUCCESS once it commits, and takes the claim over at once if it rolls
// back (see the xact column in schema.sql).
func (x *txCall) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if err := x.s.checkSize("response", p.Response); err != nil {
		return 0, err
	}
	if !x.succeeding && x.s.beforeSuccess != nil {
		x.s.beforeSuccess()
	}
	x.succeeding = true
	v, err := x.s.transition(ctx, x.s.q.WithTx(x.sp), p)
	if err == nil {
		x.s.txClaims.wrote(x.claim, v)
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == inFailedTransaction {
		return v, fmt.Errorf("%w: %s %q: the effect returned success, but an error of one of its statements was not returned; its writes are rolled back: %w",
			ErrEffectAborted, x.id.Operation, x.id.Key, err)
	}
	return v, err
}

// Finish releases the savepoint (keep) or rolls back to it, on a context
// the caller cannot cancel, bounded by the completion timeout: with the
// caller's context, once done, pgx fails the statement unsent and marks the
// savepoint closed, and the effect's writes and the SUCCESS record would
// stay in the caller's transaction, to be committed.
func (x *txCall) Finish(ctx context.Context, keep bool) error {
	x.s.txClaims.returned(x.claim)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.rt.CompletionTimeout())
	defer cancel()
	id := x.id
	if keep {
		if err := x.sp.Commit(fctx); err != nil {
			return fmt.Errorf("%w: %s %q: releasing the savepoint: %w", ErrRollbackRequired, id.Operation, id.Key, err)
		}
		return nil
	}
	if err := x.sp.Rollback(fctx); err != nil {
		if x.sp.Conn().IsClosed() {
			// pgx closes a connection whose statement's context ended
			// (its default context handling): nothing of the transaction
			// can commit, the effect's writes included.
			return fmt.Errorf("%w: %s %q: the transaction's connection was closed (a statement's context ended while it ran); nothing of the transaction can commit: %w",
				ErrRollbackRequired, id.Operation, id.Key, err)
		}
		return fmt.Errorf("%w: %s %q: rolling back to the savepoint left the effect's writes in the transaction: %w",
			ErrRollbackRequired, id.Operation, id.Key, err)
	}
	return nil
}

// Read reads id's record in the caller's transaction ([runtime.LocalReader]),
// which sees the SUCCESS record an earlier DoTx of the same identity wrote
// in it: a second call in the transaction that holds the answer replays
// it at once. Not on the caller's context: pgx closes the connection of a
// statement whose context ends, and the caller's transaction with it.
//
// A record whose version is a claim DoTx made for tx, or an outcome it
// wrote in tx, is the transaction's own ([runtime.LocalRecord]): DoTx
// remembers them per connection, for the transaction (its ID) that the
// connection runs. That costs one more statement, asking tx's ID, made only
// when the answer matters (a claim, or an expired outcome) and the
// connection has such a claim.
func (x *txCall) Read(ctx context.Context, id runtime.Identity) (runtime.LocalRecord, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.rt.CompletionTimeout())
	defer cancel()
	q := x.s.q.WithTx(x.tx)
	rec, err := x.s.read(rctx, q, id)
	if err != nil {
		return runtime.LocalRecord{}, err
	}
	out := runtime.LocalRecord{Record: rec}
	expired := !rec.ExpiresAt.After(rec.StoreNow)
	conn := x.tx.Conn()
	if (rec.State == runtime.StateProcessing || rec.State.Final() && expired) && x.s.txClaims.tracks(conn) {
		cur, err := q.CurrentXact(rctx)
		if err != nil {
			return runtime.LocalRecord{}, fmt.Errorf("pgstore: %s %q: reading the transaction's ID: %w", id.Operation, id.Key, err)
		}
		out.Own, out.Running = x.s.txClaims.lookup(conn, cur.Xact, id, rec.Version)
	}
	return out, nil
}

// txClaims remembers, for each connection, the claims DoTx made for the
// transaction it runs (the latest one: a claim of an earlier transaction
// on the connection is forgotten when the next one claims), and whether
// each call has returned. A connection is held weakly: once the pool has
// closed and dropped it, its entry goes as new ones come (asking a
// connection another goroutine uses whether it is closed would race).
type txClaims struct {
	mu     sync.Mutex
	byConn map[weak.Pointer[pgx.Conn]]*connClaims
	// pruneAt is the size of byConn at which add next drops the entries
	// of connections gone: twice the size the last pruning left (at least
	// 16), so that pruning costs O(1) per add, amortized.
	pruneAt int
}

type connClaims struct {
	xact   string // the transaction's ID
	claims map[txClaimKey]*txClaim
}

type txClaimKey struct {
	id      runtime.Identity
	version int64
}

type txClaim struct {
	key      txClaimKey
	returned bool
	cc       *connClaims // the transaction's claims, cl among them
}

// add records a claim made for transaction xact on conn, its call running.
func (c *txClaims) add(conn *pgx.Conn, xact string, id runtime.Identity, version int64) *txClaim {
	if conn == nil { // a pgx.Tx of the caller's own that names no connection
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byConn == nil {
		c.byConn = map[weak.Pointer[pgx.Conn]]*connClaims{}
	}
	if len(c.byConn) >= c.pruneAt {
		for k := range c.byConn {
			if k.Value() == nil {
				delete(c.byConn, k)
			}
		}
		c.pruneAt = max(16, 2*len(c.byConn))
	}
	wc := weak.Make(conn)
	cc := c.byConn[wc]
	if cc == nil || cc.xact != xact {
		cc = &connClaims{xact: xact, claims: map[txClaimKey]*txClaim{}}
		c.byConn[wc] = cc
	}
	cl := &txClaim{key: txClaimKey{id, version}, cc: cc}
	cc.claims[cl.key] = cl
	return cl
}

// returned marks cl's call as returned.
func (c *txClaims) returned(cl *txClaim) {
	if cl == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.returned = true
}

// wrote records version, an outcome cl's call wrote in its transaction.
func (c *txClaims) wrote(cl *txClaim, version int64) {
	if cl == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Only while cl's transaction is still the connection's latest: a
	// later one replaced cl.cc in byConn, and nothing reads it again.
	k := txClaimKey{cl.key.id, version}
	cl.cc.claims[k] = &txClaim{key: k, returned: true, cc: cl.cc}
}

// tracks reports whether conn has claims remembered.
func (c *txClaims) tracks(conn *pgx.Conn) bool {
	if conn == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byConn[weak.Make(conn)] != nil
}

// lookup reports whether id's record at version is a claim made, or an
// outcome written, for transaction xact on conn, and whether the call
// that made the claim is still running.
func (c *txClaims) lookup(conn *pgx.Conn, xact string, id runtime.Identity, version int64) (own, running bool) {
	if conn == nil {
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.byConn[weak.Make(conn)]
	if cc == nil || xact != cc.xact {
		return false, false
	}
	cl := cc.claims[txClaimKey{id, version}]
	if cl == nil {
		return false, false
	}
	return true, !cl.returned
}

// markTx names xact, the caller's transaction, on the claim just made,
// committed on its own. A claim taken over in between (its lease expired
// while the store was unreachable) is lost: the effect has not run.
func (x *txCall) markTx(ctx context.Context, xact string) error {
	var marked int64
	err := x.rt.RetryWrite(ctx, func(wctx context.Context) error {
		var err error
		marked, err = x.s.q.MarkClaimTx(wctx, db.MarkClaimTxParams{Xact: xact, Scope: x.id.Scope, Operation: x.id.Operation,
			Key: x.id.Key, Owner: x.rt.Owner(), Version: x.version})
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s %q: naming the caller's transaction on the claim: %w", x.id.Operation, x.id.Key, err)
	}
	if marked == 0 {
		return fmt.Errorf("%w: %s %q: another worker took over (version %d) before the effect could start; the effect did not run",
			runtime.ErrLeaseLost, x.id.Operation, x.id.Key, x.version)
	}
	return nil
}
