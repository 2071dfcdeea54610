package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// Group commit: the claims and the completions of concurrent callers in
// one process travel together as one set-based statement (GroupSet in
// queries/group.sql): one round trip, one statement to run, and one commit
// flush for the whole batch. Each row of the result names the caller it
// answers, so each caller gets its own outcome, as without batching: its
// claim or the existing record, its compare-and-set applied or not (with
// the token rule of a retried write).
//
// A batch holds an identity at most once among its claims and once among
// its completions (a duplicate waits for the next batch: two callers of one
// key are never both claimed by one INSERT), and its rows go sorted by
// identity, so that writers take row locks in one order. A batch is one
// implicit transaction, all or nothing: when the statement fails, nothing
// of it committed, and every caller of the batch runs its own statement
// again alone, so that one bad row fails only its own caller.

// DefaultGroupCommitBatch is the batch size of [WithGroupCommit] when it is
// given none.
const DefaultGroupCommitBatch = 64

// WithGroupCommit sends the claims and the completions of concurrent
// callers as set-based statements of at most maxBatch rows
// (DefaultGroupCommitBatch when not positive): one INSERT claims a batch,
// one UPDATE completes one, and each caller still gets its own outcome.
//
// Batch size and added latency: one batch is in flight at a time; the
// next one leaves as soon as it returns, with whatever has queued
// meanwhile, up to maxBatch claims and maxBatch completions; nothing waits
// for a timer. A caller that finds nothing in flight runs its own statement
// at once, on its own goroutine: a lone caller waits for nobody. Under load
// a caller waits for the batch in flight to return (at most one batch round
// trip, a commit flush included) and then for its own batch: the added
// latency is one batch round trip, plus one more for every maxBatch callers
// of its kind queued ahead of it. Two calls of one identity never share a
// batch's claims (or its completions), so the k-th concurrent duplicate of
// a key waits for k-1 batches.
//
// When it wins: with tens of concurrent first calls on one store. At 32
// callers (fsync on) a first call costs 0.13 commits and WAL flushes and
// 0.17 ms of server CPU, against the floor's 2 commits, 0.26 flushes (which
// PostgreSQL merges itself) and 0.43 ms; at 8 callers 0.50 commits, 0.49
// flushes and 0.27 ms, against 2, 0.61 and 0.42 ms. Throughput follows
// when the server is CPU-bound, not when the disk's flushes dominate: see
// the README's Performance section for the ratios measured.
//
// A failed batch (an invalid row, a deadlock, a lost connection) is run
// again statement by statement, each caller getting its own result. A
// caller whose context ends while its statement is queued is withdrawn;
// once its batch is in flight, it waits for the batch's outcome, so that
// it is never told a write failed that then commits. A batch waits for its
// reply until the latest of its callers' deadlines (at most 30 s), and each
// of its callers waits for that outcome: a caller whose deadline is earlier
// than a batch mate's (or a caller without a deadline's) can wait past its
// own deadline when the batch's reply is slow, up to that bound, rather than
// be told something false. A batch in flight for half a second or more is
// stuck (its reply held, a lock): later callers run their statements at
// once, beside it. DoTx's claim and FAILED record
// are batched like any other; what it writes inside the caller's
// transaction is not. Renew, Release, Get and the reconciler's statements
// are never batched.
func WithGroupCommit(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch <= 0 {
			maxBatch = DefaultGroupCommitBatch
		}
		s.group = &groupCommit{maxBatch: maxBatch, q: db.New(s.pool), lockWait: batchLockWait}
	}
}

// batchTimeout bounds one batch on the server: it runs on a context of its
// own, since it serves callers with different contexts, which ends at the
// latest of their deadlines (batchDeadline) or after batchTimeout.
const batchTimeout = 30 * time.Second

// stuckAfter is how long a caller waits in the queue behind a batch in
// flight before it withdraws and runs its own statement, and how old a
// batch in flight is when new callers stop queueing behind it and run their
// own statements at once: a batch whose reply is held or lost (a stalled
// connection, a lock) must not stall every caller of the store until
// batchTimeout, nor cost each later caller this wait. A healthy batch takes
// a commit's flush, far less.
const stuckAfter = 500 * time.Millisecond

// batchLockWait bounds how long a batch's statement waits on a row lock or
// on another transaction's insert of one of its identities (GroupSet's
// lock_timeout). Past it the batch commits nothing and each caller runs its
// own statement, so that a row held elsewhere (a DoTx's transaction) holds
// up only the callers of that row, and duplicates of the batch's other
// claims never wait on inserts that cannot commit. Writers that lock a row
// for a statement (renewals, other batches) hold it for a commit's flush.
const batchLockWait = 200 * time.Millisecond

// groupCommit queues the claims and the completions of callers and sends
// them, one batch at a time, as one statement (GroupSet).
type groupCommit struct {
	maxBatch int
	q        *db.Queries
	// lockWait is GroupSet's lock_timeout: batchLockWait, which tests
	// that hold a row on purpose while they watch the batch wait raise.
	lockWait time.Duration

	mu   sync.Mutex
	busy bool // a batch (or a lone caller's statement) is in flight
	// sent is when the batch or statement in flight was sent (zero when
	// none is): once it is stuckAfter old, new callers run their own
	// statement beside it at once instead of queueing behind it.
	sent        time.Time
	claims      []*batchItem[db.ClaimParams, []db.ClaimRow]
	transitions []*batchItem[db.TransitionParams, []int64]

	// batches, statements and failed count what was sent (for tests and
	// GroupCommitStats).
	batches, statements, failed atomic.Int64
	// beside counts the statements run alone, on their caller's context,
	// beside a stuck batch (for tests).
	beside atomic.Int64
}

// GroupCommitStats reports how many batches the group-commit mode sent (a
// statement a caller ran alone counts as a batch of one), how many callers'
// statements they carried, and how many batches failed as a whole (and
// were run again statement by statement). All zero without group commit.
func (s *Store) GroupCommitStats() (batches, statements, failed int64) {
	if s.group == nil {
		return 0, 0, 0
	}
	return s.group.batches.Load(), s.group.statements.Load(), s.group.failed.Load()
}

// errBatchResult reports a batch result that names no caller, or one twice:
// a bug, answered to every caller of the batch as an error.
var errBatchResult = errors.New("pgstore: group commit: inconsistent batch result")

type batchItem[A, R any] struct {
	id  runtime.Identity
	arg A
	// deadline is the caller's (zero: none).
	deadline time.Time
	res      R
	err      error
	// retry: the batch failed as a whole; the caller runs the statement alone.
	retry bool
	done  chan struct{}
}

// idle reports whether nothing is queued; g.mu is held.
func (g *groupCommit) idle() bool { return len(g.claims) == 0 && len(g.transitions) == 0 }

// submit runs arg, of identity id, queued in *queue (g.claims or
// g.transitions), and returns its result. When nothing is in flight or
// queued, the caller runs its own statement at once (one, on its own
// context): a lone caller waits for nobody. Otherwise arg is queued and
// submit waits for its batch; retry reports that the batch failed as a
// whole and nothing of it was committed.
func submit[A, R any](ctx context.Context, s *Store, queue *[]*batchItem[A, R], id runtime.Identity, arg A,
	one func(context.Context, A) (R, error)) (res R, retry bool, err error) {
	g := s.group
	g.mu.Lock()
	if g.busy && !g.sent.IsZero() && time.Since(g.sent) >= stuckAfter {
		// The batch in flight is stuck (its reply held or lost): it answers
		// its own callers when it ends, up to batchTimeout; nobody else
		// waits for it.
		g.mu.Unlock()
		g.batches.Add(1)
		g.statements.Add(1)
		g.beside.Add(1)
		res, err = one(ctx, arg)
		return res, false, err
	}
	if !g.busy && g.idle() {
		g.busy = true
		g.sent = time.Now()
		g.mu.Unlock()
		res, err = one(ctx, arg)
		g.batches.Add(1)
		g.statements.Add(1)
		g.release(s)
		return res, false, err
	}
	it := &batchItem[A, R]{id: id, arg: arg, done: make(chan struct{})}
	it.deadline, _ = ctx.Deadline()
	*queue = append(*queue, it)
	lead := !g.busy
	g.busy = true
	g.mu.Unlock()
	if lead {
		go g.flush(s)
	}
	stuck := time.NewTimer(stuckAfter)
	defer stuck.Stop()
	select {
	case <-it.done:
	case <-stuck.C:
		if withdraw(g, queue, it) {
			// Never sent, and the batch ahead is stuck: run alone, beside it.
			if err := context.Cause(ctx); err != nil {
				var zero R
				return zero, false, err
			}
			g.batches.Add(1)
			g.statements.Add(1)
			g.beside.Add(1)
			res, err = one(ctx, arg)
			return res, false, err
		}
		<-it.done // sent meanwhile
	case <-ctx.Done():
		if withdraw(g, queue, it) {
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

// withdraw removes it from *queue, unless a batch has taken it.
func withdraw[A, R any](g *groupCommit, queue *[]*batchItem[A, R], it *batchItem[A, R]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(*queue, it)
	if i < 0 {
		return false
	}
	*queue = slices.Delete(*queue, i, i+1)
	return true
}

// release ends a statement in flight: the next batch leaves at once when
// callers queued meanwhile.
func (g *groupCommit) release(s *Store) {
	g.mu.Lock()
	if g.idle() {
		g.busy = false
		g.sent = time.Time{}
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go g.flush(s)
}

// take removes the next batch from *queue; g.mu is held. In queue order,
// at most max items, an identity at most once (a later duplicate stays
// queued, in order, for a later batch). The batch comes sorted by identity.
func take[A, R any](queue *[]*batchItem[A, R], max int) []*batchItem[A, R] {
	n := min(len(*queue), max)
	if n == 0 {
		return nil
	}
	batch := make([]*batchItem[A, R], 0, n)
	seen := make(map[runtime.Identity]struct{}, n)
	rest := (*queue)[:0]
	for _, it := range *queue {
		if _, dup := seen[it.id]; len(batch) < max && !dup {
			seen[it.id] = struct{}{}
			batch = append(batch, it)
			continue
		}
		rest = append(rest, it)
	}
	clear((*queue)[len(rest):])
	*queue = rest
	slices.SortFunc(batch, func(a, b *batchItem[A, R]) int { return compareIdentity(a.id, b.id) })
	return batch
}

func compareIdentity(a, b runtime.Identity) int {
	return cmp.Or(cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Key, b.Key))
}

// next takes the next batch: up to maxBatch claims and up to maxBatch
// completions.
func (g *groupCommit) next() (claims []*batchItem[db.ClaimParams, []db.ClaimRow], transitions []*batchItem[db.TransitionParams, []int64]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	claims, transitions = take(&g.claims, g.maxBatch), take(&g.transitions, g.maxBatch)
	if claims != nil || transitions != nil {
		g.sent = time.Now()
	}
	return claims, transitions
}

// flush sends batches until none is queued, then frees the slot.
func (g *groupCommit) flush(s *Store) {
	for {
		claims, transitions := g.next()
		if claims == nil && transitions == nil {
			g.mu.Lock()
			if !g.idle() { // queued after next looked
				g.mu.Unlock()
				continue
			}
			g.busy = false
			g.sent = time.Time{}
			g.mu.Unlock()
			return
		}
		g.run(s, claims, transitions)
	}
}

// run sends one batch and answers each of its callers exactly once. A
// batch of one runs the caller's own statement, whose error is the
// caller's own: it is not run again.
func (g *groupCommit) run(s *Store, claims []*batchItem[db.ClaimParams, []db.ClaimRow], transitions []*batchItem[db.TransitionParams, []int64]) {
	ctx, cancel := context.WithDeadline(context.Background(), batchDeadline(claims, transitions))
	defer cancel()
	g.batches.Add(1)
	g.statements.Add(int64(len(claims) + len(transitions)))
	switch {
	case len(claims) == 1 && len(transitions) == 0:
		it := claims[0]
		it.res, it.err = s.q.Claim(ctx, it.arg)
		close(it.done)
		return
	case len(claims) == 0 && len(transitions) == 1:
		it := transitions[0]
		it.res, it.err = s.q.Transition(ctx, it.arg)
		close(it.done)
		return
	}
	cres := make([][]db.ClaimRow, len(claims))
	tres := make([][]int64, len(transitions))
	err := g.send(ctx, claims, transitions, cres, tres)
	if err != nil {
		g.failed.Add(1)
	}
	answer(claims, cres, err)
	answer(transitions, tres, err)
}

// batchDeadline is when a batch stops waiting for its reply: the latest of
// its callers' deadlines, at most batchTimeout from now. Past it nobody
// waits for the answer (each caller then runs its statement again, alone,
// as after any failed batch, and meets its own deadline at once), so that
// a caller waits for its batch no longer than it would for its own
// statement; before it, a caller whose deadline is earlier than another's
// waits for the batch's outcome, never told that a write failed that then
// commits.
func batchDeadline(claims []*batchItem[db.ClaimParams, []db.ClaimRow], transitions []*batchItem[db.TransitionParams, []int64]) time.Time {
	limit := time.Now().Add(batchTimeout)
	var latest time.Time
	for _, it := range claims {
		if it.deadline.IsZero() {
			return limit
		}
		latest = later(latest, it.deadline)
	}
	for _, it := range transitions {
		if it.deadline.IsZero() {
			return limit
		}
		latest = later(latest, it.deadline)
	}
	if latest.IsZero() || latest.After(limit) {
		return limit
	}
	return latest
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// answer gives each caller of a batch its result, or the batch's error.
func answer[A, R any](batch []*batchItem[A, R], res []R, err error) {
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

// send runs GroupSet for a batch and stores each caller's result in cres
// and tres (left nil for a caller the statement returned nothing for).
func (g *groupCommit) send(ctx context.Context, claims []*batchItem[db.ClaimParams, []db.ClaimRow],
	transitions []*batchItem[db.TransitionParams, []int64], cres [][]db.ClaimRow, tres [][]int64) error {
	nc, nt := len(claims), len(transitions)
	p := db.GroupSetParams{
		CScopes: make([]string, nc), COperations: make([]string, nc), CKeys: make([]string, nc),
		CFingerprints: make([][]byte, nc), COwners: make([]string, nc), CLeases: make([]pgtype.Interval, nc),
		CRequests: make([][]byte, nc),
		TScopes:   make([]string, nt), TOperations: make([]string, nt), TKeys: make([]string, nt),
		TFromStates: make([]string, nt), TOwners: make([]string, nt), TVersions: make([]int64, nt),
		TToStates: make([]string, nt), TNewOwners: make([]string, nt), TLeases: make([]pgtype.Interval, nt),
		TTtls: make([]pgtype.Interval, nt), TResponses: make([][]byte, nt), TResponsesOmitted: make([]bool, nt),
		TNotes: make([]string, nt), TTokens: make([]string, nt),
		LockTimeout: strconv.FormatInt(g.lockWait.Milliseconds(), 10) + "ms",
	}
	for i, it := range claims {
		a := &it.arg
		p.CScopes[i], p.COperations[i], p.CKeys[i] = a.Scope, a.Operation, a.Key
		p.CFingerprints[i], p.COwners[i], p.CLeases[i], p.CRequests[i] = a.Fingerprint, a.Owner, a.Lease, a.Request
	}
	for i, it := range transitions {
		a := &it.arg
		p.TScopes[i], p.TOperations[i], p.TKeys[i] = a.Scope, a.Operation, a.Key
		p.TFromStates[i], p.TOwners[i], p.TVersions[i] = a.FromState, a.Owner, a.Version
		p.TToStates[i], p.TNewOwners[i], p.TLeases[i], p.TTtls[i] = a.ToState, a.NewOwner, a.Lease, a.Ttl
		p.TResponses[i], p.TResponsesOmitted[i], p.TNotes[i], p.TTokens[i] = a.Response, a.ResponseOmitted, a.Note, a.Token
	}
	rows, err := g.q.GroupSet(ctx, p)
	if err != nil {
		return err
	}
	for _, r := range rows {
		switch r.Kind {
		case "c":
			i, err := callerOf(r.I, cres)
			if err != nil {
				return err
			}
			if r.Claimed {
				// The store chose the version, the lease and the time; the
				// rest of a new record is the caller's (GroupSet sends
				// only those back).
				a := &claims[i].arg
				cres[i] = []db.ClaimRow{{
					Claimed: true, Scope: a.Scope, Operation: a.Operation, Key: a.Key, Fingerprint: a.Fingerprint,
					State: string(runtime.StateProcessing), Owner: a.Owner, Version: r.Version,
					LeaseExpiresAt: r.LeaseExpiresAt, Request: a.Request, CreatedAt: r.CreatedAt,
					UpdatedAt: r.UpdatedAt, StoreNow: r.StoreNow,
				}}
				continue
			}
			cres[i] = []db.ClaimRow{{
				Scope: r.Scope, Operation: r.Operation, Key: r.Key, Fingerprint: r.Fingerprint,
				State: r.State, Owner: r.Owner, Version: r.Version, LeaseExpiresAt: r.LeaseExpiresAt,
				ExpiresAt: r.ExpiresAt, Request: r.Request, Response: r.Response, Takeovers: r.Takeovers,
				Attempts: r.Attempts, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Token: r.Token,
				Note: r.Note, ResponseOmitted: r.ResponseOmitted, StoreNow: r.StoreNow,
			}}
		case "t":
			i, err := callerOf(r.I, tres)
			if err != nil {
				return err
			}
			tres[i] = []int64{r.Version}
		default:
			return fmt.Errorf("%w: a row of kind %q", errBatchResult, r.Kind)
		}
	}
	return nil
}

// callerOf returns the index in res of the caller a result row names (its
// i, from 1), which must not have been answered yet.
func callerOf[R any](i int64, res [][]R) (int, error) {
	if i < 1 || i > int64(len(res)) || res[i-1] != nil {
		return 0, fmt.Errorf("%w: a row for caller %d of %d", errBatchResult, i, len(res))
	}
	return int(i - 1), nil
}

// claimRows runs the claim statement, batched when group commit is on and
// q is the pool's (DoTx runs on its transaction, unbatched).
func (s *Store) claimRows(ctx context.Context, q *db.Queries, arg db.ClaimParams) ([]db.ClaimRow, error) {
	if s.group == nil || q != s.q {
		return q.Claim(ctx, arg)
	}
	id := runtime.Identity{Scope: arg.Scope, Operation: arg.Operation, Key: arg.Key}
	res, retry, err := submit(ctx, s, &s.group.claims, id, arg, s.q.Claim)
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
	res, retry, err := submit(ctx, s, &s.group.transitions, id, arg, s.q.Transition)
	if retry {
		return q.Transition(ctx, arg)
	}
	return res, err
}
