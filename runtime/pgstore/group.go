package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

// Group commit: claims (and, separately, completions) of concurrent callers
// in one process travel together in one pgx batch, which PostgreSQL runs as
// one implicit transaction: one round trip and one commit flush for the
// lot. A batch is sent as soon as the previous one of its kind returned, so
// a lone caller waits for nobody, and under load batches grow by themselves:
// the added latency is at most the round trip of the batch in flight.
//
// A batch is all or nothing: when any statement in it fails, PostgreSQL
// rolls the whole implicit transaction back, so no result of it is
// delivered; every caller of that batch runs its statement again on its
// own. Each caller gets its own result (its claim, or its CAS outcome), as
// without batching.

// WithGroupCommit sends the claims and the completions of concurrent
// callers in batches of at most maxBatch statements (default 64 when not
// positive), one batch of each kind in flight at a time. It raises
// throughput when many callers complete at once (each batch is one commit
// flush); a single caller sees no delay. DoTx is not batched.
func WithGroupCommit(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch <= 0 {
			maxBatch = 64
		}
		s.group = &groupCommit{maxBatch: maxBatch}
	}
}

// maxInFlight is how many batches of one kind may be in flight at once, on
// as many connections: the server's own group commit merges their flushes.
const maxInFlight = 4

// batchTimeout bounds one batch on the server: it runs on a context of its
// own, since it serves callers with different contexts.
const batchTimeout = 30 * time.Second

type groupCommit struct {
	maxBatch int

	mu          sync.Mutex
	claims      []*claimItem
	transitions []*transitionItem
	claiming    int // claim batches in flight
	completing  int // transition batches in flight

	// batches, statements and failed count what was sent (for tests and
	// GroupCommitStats).
	batches, statements, failed atomic.Int64
}

// GroupCommitStats reports how many batches the group-commit mode sent, how
// many statements they carried, and how many batches failed as a whole (and
// were run again statement by statement). All zero without group commit.
func (s *Store) GroupCommitStats() (batches, statements, failed int64) {
	if s.group == nil {
		return 0, 0, 0
	}
	return s.group.batches.Load(), s.group.statements.Load(), s.group.failed.Load()
}

func (g *groupCommit) count(n int, failed bool) {
	g.batches.Add(1)
	g.statements.Add(int64(n))
	if failed {
		g.failed.Add(1)
	}
}

type claimItem struct {
	arg  db.ClaimBatchParams
	rows []db.ClaimBatchRow
	err  error
	// retry: the batch failed as a whole; the caller runs the statement alone.
	retry bool
	done  chan struct{}
}

type transitionItem struct {
	arg   db.TransitionBatchParams
	vs    []int64
	err   error
	retry bool
	done  chan struct{}
}

// claim queues one claim statement and waits for its batch.
func (g *groupCommit) claim(ctx context.Context, s *Store, arg db.ClaimParams) ([]db.ClaimRow, error) {
	it := &claimItem{arg: db.ClaimBatchParams(arg), done: make(chan struct{})}
	g.mu.Lock()
	g.claims = append(g.claims, it)
	lead := g.claiming < maxInFlight
	if lead {
		g.claiming++
	}
	g.mu.Unlock()
	if lead {
		go g.flushClaims(s)
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		// The statement may still run and commit: like a reply lost on
		// the network, the claim is then left to its lease.
		return nil, context.Cause(ctx)
	}
	if it.retry {
		return s.q.Claim(ctx, arg)
	}
	rows := make([]db.ClaimRow, len(it.rows))
	for i, r := range it.rows {
		rows[i] = db.ClaimRow(r)
	}
	return rows, it.err
}

func (g *groupCommit) flushClaims(s *Store) {
	for {
		g.mu.Lock()
		n := min(len(g.claims), g.maxBatch)
		if n == 0 {
			g.claiming--
			g.mu.Unlock()
			return
		}
		batch := g.claims[:n:n]
		g.claims = g.claims[n:]
		g.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		args := make([]db.ClaimBatchParams, len(batch))
		for i, it := range batch {
			args[i] = it.arg
		}
		br := s.q.ClaimBatch(ctx, args)
		failed := false
		br.Query(func(i int, rows []db.ClaimBatchRow, err error) {
			batch[i].rows, batch[i].err = rows, err
			failed = failed || err != nil
		})
		if err := br.Close(); err != nil {
			failed = true
		}
		cancel()
		g.count(len(batch), failed)
		for _, it := range batch {
			// All or nothing: a failed batch committed nothing.
			it.retry = failed
			close(it.done)
		}
	}
}

// transition queues one transition statement and waits for its batch.
func (g *groupCommit) transition(ctx context.Context, s *Store, arg db.TransitionParams) ([]int64, error) {
	it := &transitionItem{arg: db.TransitionBatchParams(arg), done: make(chan struct{})}
	g.mu.Lock()
	g.transitions = append(g.transitions, it)
	lead := g.completing < maxInFlight
	if lead {
		g.completing++
	}
	g.mu.Unlock()
	if lead {
		go g.flushTransitions(s)
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		// Applied or not, the runtime's retry recognises its token.
		return nil, context.Cause(ctx)
	}
	if it.retry {
		return s.q.Transition(ctx, arg)
	}
	return it.vs, it.err
}

func (g *groupCommit) flushTransitions(s *Store) {
	for {
		g.mu.Lock()
		n := min(len(g.transitions), g.maxBatch)
		if n == 0 {
			g.completing--
			g.mu.Unlock()
			return
		}
		batch := g.transitions[:n:n]
		g.transitions = g.transitions[n:]
		g.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		args := make([]db.TransitionBatchParams, len(batch))
		for i, it := range batch {
			args[i] = it.arg
		}
		br := s.q.TransitionBatch(ctx, args)
		failed := false
		br.Query(func(i int, vs []int64, err error) {
			batch[i].vs, batch[i].err = vs, err
			failed = failed || err != nil
		})
		if err := br.Close(); err != nil {
			failed = true
		}
		cancel()
		g.count(len(batch), failed)
		for _, it := range batch {
			it.retry = failed
			close(it.done)
		}
	}
}

// claimRows runs the claim statement, batched when group commit is on and
// q is the pool's.
func (s *Store) claimRows(ctx context.Context, q *db.Queries, arg db.ClaimParams) ([]db.ClaimRow, error) {
	if s != nil && s.group != nil && q == s.q {
		return s.group.claim(ctx, s, arg)
	}
	return q.Claim(ctx, arg)
}

// transitionRows runs the transition statement, batched likewise.
func (s *Store) transitionRows(ctx context.Context, q *db.Queries, arg db.TransitionParams) ([]int64, error) {
	if s != nil && s.group != nil && q == s.q {
		return s.group.transition(ctx, s, arg)
	}
	return q.Transition(ctx, arg)
}
