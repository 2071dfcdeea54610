package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// Group commit: the claims (and, separately, the completions) of concurrent
// callers in one process travel together as one set-based statement
// (ClaimSet, TransitionSet in queries/group.sql): one round trip, one
// statement to plan and run, and one commit flush for the whole batch. Each
// row of the result names the caller it answers, so each caller gets its own
// outcome, as without batching: its claim or the existing record, its
// compare-and-set applied or not (with the token rule of a retried write).
//
// A batch holds an identity at most once (a duplicate waits for the next
// batch: two callers of one key are never both claimed by one INSERT), and
// its rows go sorted by identity, so that concurrent batches take their
// locks in one order. A batch is one implicit transaction, all or nothing:
// when the statement fails, nothing of it committed, and every caller of
// the batch runs its own statement again alone, so that one bad row fails
// only its own caller.

// DefaultGroupCommitBatch is the batch size of [WithGroupCommit] when it is
// given none.
const DefaultGroupCommitBatch = 64

// WithGroupCommit sends the claims and the completions of concurrent
// callers as set-based statements of at most maxBatch rows
// (DefaultGroupCommitBatch when not positive): one INSERT claims a batch,
// one UPDATE completes one, and each caller still gets its own outcome.
//
// Batch size and added latency: one batch of each kind (claims,
// completions) is in flight at a time; the next one leaves as soon as it
// returns, with whatever has queued meanwhile, up to maxBatch rows; nothing
// waits for a timer. A caller that finds no batch of its kind in flight
// runs its own statement at once, on its own goroutine: a lone caller waits
// for nobody. Under load a caller waits for the batch in flight to return
// (at most one batch round trip, a commit flush included) and then for its
// own batch: the added latency is one batch round trip, plus one more for
// every maxBatch callers queued ahead of it. Two calls of one identity
// never share a batch, so the k-th concurrent duplicate of a key waits for
// k-1 batches.
//
// When it wins: with tens of concurrent first calls on one store. At 32
// callers (fsync on) a first call costs 0.23 commits and WAL flushes
// instead of the floor's 2 commits (0.32 flushes, which PostgreSQL merges
// itself), and throughput is 1.2x to 1.7x the floor's while the server is
// CPU-bound; when the disk's flushes dominate it is no faster than the
// floor, and at 8 callers or fewer it does not win (see the README's
// Performance section). A failed batch (an invalid row, a deadlock, a lost
// connection) is run again statement by statement, each caller getting its
// own result. A caller whose context ends while its statement is queued is
// withdrawn; once its batch is in flight, it waits for the batch's outcome
// (bounded by a 30 s timeout), so that it is never told a write failed
// that then commits. DoTx's claim and FAILED record are batched like any
// other; what it writes inside the caller's transaction is not. Renew,
// Release, Get and the reconciler's statements are never batched.
func WithGroupCommit(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch <= 0 {
			maxBatch = DefaultGroupCommitBatch
		}
		s.group = &groupCommit{maxBatch: maxBatch, q: db.New(s.pool)}
	}
}

// maxInFlight is how many batches of one kind may be in flight at once, on
// as many connections: while they run, the next batch gathers. One
// measured best (BenchmarkPerf, fsync on): with more, batches shrink and
// the commits they save come back.
const maxInFlight = 1

// batchTimeout bounds one batch on the server: it runs on a context of its
// own, since it serves callers with different contexts.
const batchTimeout = 30 * time.Second

type groupCommit struct {
	maxBatch    int
	q           *db.Queries
	claims      batchQueue[db.ClaimParams, []db.ClaimRow]
	transitions batchQueue[db.TransitionParams, []int64]

	// batches, statements and failed count what was sent (for tests and
	// GroupCommitStats).
	batches, statements, failed atomic.Int64
}

// GroupCommitStats reports how many batches the group-commit mode sent, how
// many callers' statements they carried, and how many batches failed as a
// whole (and were run again statement by statement). All zero without group
// commit.
func (s *Store) GroupCommitStats() (batches, statements, failed int64) {
	if s.group == nil {
		return 0, 0, 0
	}
	return s.group.batches.Load(), s.group.statements.Load(), s.group.failed.Load()
}

// errBatchResult reports a batch result that names no caller, or one twice:
// a bug, answered to every caller of the batch as an error.
var errBatchResult = errors.New("pgstore: group commit: inconsistent batch result")

// batchQueue gathers the statements of one kind (arguments A, result R) for
// batches of at most maxBatch distinct identities, with at most maxInFlight
// batches in flight.
type batchQueue[A, R any] struct {
	mu       sync.Mutex
	pending  []*batchItem[A, R]
	inFlight int
}

type batchItem[A, R any] struct {
	id  runtime.Identity
	arg A
	res R
	err error
	// retry: the batch failed as a whole; the caller runs the statement alone.
	retry bool
	done  chan struct{}
}

// sendFunc runs one batch as one statement and stores each caller's result
// in res (indexed like args; left zero for a caller the statement returned
// nothing for). An error means the statement failed and nothing of it
// committed, except errBatchResult.
type sendFunc[A, R any] func(ctx context.Context, args []A, res []R) error

// do runs arg, of identity id, and returns its result. When nothing is
// queued and a sender is free, the caller runs its own statement at once
// (one, on its own context): a lone caller waits for nobody. Otherwise arg
// is queued and do waits for its batch; retry reports that the batch failed
// as a whole and nothing of it was committed.
func (q *batchQueue[A, R]) do(ctx context.Context, g *groupCommit, id runtime.Identity, arg A,
	one func(context.Context, A) (R, error), send sendFunc[A, R]) (res R, retry bool, err error) {
	q.mu.Lock()
	if q.inFlight < maxInFlight && len(q.pending) == 0 {
		q.inFlight++
		q.mu.Unlock()
		res, err = one(ctx, arg)
		g.batches.Add(1)
		g.statements.Add(1)
		q.mu.Lock()
		if len(q.pending) > 0 {
			// Callers queued meanwhile: the slot goes to a sender for them.
			q.mu.Unlock()
			go q.flush(g, one, send)
		} else {
			q.inFlight--
			q.mu.Unlock()
		}
		return res, false, err
	}
	it := &batchItem[A, R]{id: id, arg: arg, done: make(chan struct{})}
	q.pending = append(q.pending, it)
	lead := q.inFlight < maxInFlight
	if lead {
		q.inFlight++
	}
	q.mu.Unlock()
	if lead {
		go q.flush(g, one, send)
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		if q.withdraw(it) {
			// Never sent: nothing of it can commit.
			var zero R
			return zero, false, context.Cause(ctx)
		}
		// In a batch in flight: its outcome is on its way, and answering
		// the caller before it would tell it something false (a completion
		// "not recorded" that then commits). Wait for it: at most one batch
		// round trip, bounded by batchTimeout.
		<-it.done
	}
	return it.res, it.retry, it.err
}

// withdraw removes it from the queue, unless a batch has taken it.
func (q *batchQueue[A, R]) withdraw(it *batchItem[A, R]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.pending, it)
	if i < 0 {
		return false
	}
	q.pending = slices.Delete(q.pending, i, i+1)
	return true
}

// take removes the next batch from the queue: in queue order, at most max
// items, an identity at most once (a later duplicate stays queued, in
// order, for a later batch). The batch comes sorted by identity.
func (q *batchQueue[A, R]) take(max int) []*batchItem[A, R] {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.pending), max)
	if n == 0 {
		return nil
	}
	batch := make([]*batchItem[A, R], 0, n)
	seen := make(map[runtime.Identity]struct{}, n)
	rest := q.pending[:0]
	for _, it := range q.pending {
		if _, dup := seen[it.id]; len(batch) < max && !dup {
			seen[it.id] = struct{}{}
			batch = append(batch, it)
			continue
		}
		rest = append(rest, it)
	}
	clear(q.pending[len(rest):])
	q.pending = rest
	slices.SortFunc(batch, func(a, b *batchItem[A, R]) int { return compareIdentity(a.id, b.id) })
	return batch
}

func compareIdentity(a, b runtime.Identity) int {
	return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Key, b.Key))
}

// flush sends batches until none is pending, then gives its sender slot
// back.
func (q *batchQueue[A, R]) flush(g *groupCommit, one func(context.Context, A) (R, error), send sendFunc[A, R]) {
	for {
		batch := q.take(g.maxBatch)
		if batch == nil {
			q.mu.Lock()
			if len(q.pending) > 0 { // queued after take looked
				q.mu.Unlock()
				continue
			}
			q.inFlight--
			q.mu.Unlock()
			return
		}
		q.run(g, batch, one, send)
	}
}

// run sends one batch and answers each of its callers exactly once. A
// batch of one runs the caller's own statement (one), whose error is the
// caller's own: it is not run again.
func (q *batchQueue[A, R]) run(g *groupCommit, batch []*batchItem[A, R], one func(context.Context, A) (R, error), send sendFunc[A, R]) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	g.batches.Add(1)
	g.statements.Add(int64(len(batch)))
	if len(batch) == 1 {
		it := batch[0]
		it.res, it.err = one(ctx, it.arg)
		close(it.done)
		return
	}
	args := make([]A, len(batch))
	for i, it := range batch {
		args[i] = it.arg
	}
	res := make([]R, len(batch))
	err := send(ctx, args, res)
	if err != nil {
		g.failed.Add(1)
	}
	for i, it := range batch {
		switch {
		case err == nil:
			it.res = res[i]
		case errors.Is(err, errBatchResult):
			it.err = err
		default:
			// All or nothing: a failed statement committed nothing.
			it.retry = true
		}
		close(it.done)
	}
}

// callerOf returns the index in res of the caller a result row names (its
// i, from 1), which must not have been answered yet.
func callerOf[R any](i int64, res [][]R) (int, error) {
	if i < 1 || i > int64(len(res)) || res[i-1] != nil {
		return 0, fmt.Errorf("%w: a row for caller %d of %d", errBatchResult, i, len(res))
	}
	return int(i - 1), nil
}

// sendClaims runs ClaimSet for a batch of claims.
func (s *Store) sendClaims(ctx context.Context, args []db.ClaimParams, res [][]db.ClaimRow) error {
	n := len(args)
	p := db.ClaimSetParams{
		Scopes: make([]string, n), Operations: make([]string, n), Keys: make([]string, n),
		Fingerprints: make([][]byte, n), Owners: make([]string, n), Leases: make([]pgtype.Interval, n),
		Requests: make([][]byte, n),
	}
	for i, a := range args {
		p.Scopes[i], p.Operations[i], p.Keys[i] = a.Scope, a.Operation, a.Key
		p.Fingerprints[i], p.Owners[i], p.Leases[i], p.Requests[i] = a.Fingerprint, a.Owner, a.Lease, a.Request
	}
	rows, err := s.group.q.ClaimSet(ctx, p)
	if err != nil {
		return err
	}
	for _, r := range rows {
		i, err := callerOf(r.I, res)
		if err != nil {
			return err
		}
		res[i] = []db.ClaimRow{{
			Claimed: r.Claimed, Scope: r.Scope, Operation: r.Operation, Key: r.Key, Fingerprint: r.Fingerprint,
			State: r.State, Owner: r.Owner, Version: r.Version, LeaseExpiresAt: r.LeaseExpiresAt,
			ExpiresAt: r.ExpiresAt, Request: r.Request, Response: r.Response, Takeovers: r.Takeovers,
			Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Token: r.Token,
			Note: r.Note, ResponseOmitted: r.ResponseOmitted, StoreNow: r.StoreNow,
		}}
	}
	return nil
}

// sendTransitions runs TransitionSet for a batch of transitions.
func (s *Store) sendTransitions(ctx context.Context, args []db.TransitionParams, res [][]int64) error {
	n := len(args)
	p := db.TransitionSetParams{
		Scopes: make([]string, n), Operations: make([]string, n), Keys: make([]string, n),
		FromStates: make([]string, n), Owners: make([]string, n), Versions: make([]int64, n),
		ToStates: make([]string, n), NewOwners: make([]string, n), Leases: make([]pgtype.Interval, n),
		Ttls: make([]pgtype.Interval, n), Responses: make([][]byte, n), ResponsesOmitted: make([]bool, n),
		Notes: make([]string, n), Tokens: make([]string, n),
	}
	for i, a := range args {
		p.Scopes[i], p.Operations[i], p.Keys[i] = a.Scope, a.Operation, a.Key
		p.FromStates[i], p.Owners[i], p.Versions[i] = a.FromState, a.Owner, a.Version
		p.ToStates[i], p.NewOwners[i], p.Leases[i], p.Ttls[i] = a.ToState, a.NewOwner, a.Lease, a.Ttl
		p.Responses[i], p.ResponsesOmitted[i], p.Notes[i], p.Tokens[i] = a.Response, a.ResponseOmitted, a.Note, a.Token
	}
	rows, err := s.group.q.TransitionSet(ctx, p)
	if err != nil {
		return err
	}
	for _, r := range rows {
		i, err := callerOf(r.I, res)
		if err != nil {
			return err
		}
		res[i] = []int64{r.Version}
	}
	return nil
}

// claimRows runs the claim statement, batched when group commit is on and
// q is the pool's (DoTx runs on its transaction, unbatched).
func (s *Store) claimRows(ctx context.Context, q *db.Queries, arg db.ClaimParams) ([]db.ClaimRow, error) {
	if s.group == nil || q != s.q {
		return q.Claim(ctx, arg)
	}
	id := runtime.Identity{Scope: arg.Scope, Operation: arg.Operation, Key: arg.Key}
	res, retry, err := s.group.claims.do(ctx, s.group, id, arg, s.q.Claim, s.sendClaims)
	if retry {
		return q.Claim(ctx, arg)
	}
	return res, err
}

// transitionRows runs the transition statement, batched likewise.
func (s *Store) transitionRows(ctx context.Context, q *db.Queries, arg db.TransitionParams) ([]int64, error) {
	if s.group == nil || q != s.q {
		return q.Transition(ctx, arg)
	}
	id := runtime.Identity{Scope: arg.Scope, Operation: arg.Operation, Key: arg.Key}
	res, retry, err := s.group.transitions.do(ctx, s.group, id, arg, s.q.Transition, s.sendTransitions)
	if retry {
		return q.Transition(ctx, arg)
	}
	return res, err
}
