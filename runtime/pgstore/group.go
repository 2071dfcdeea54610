package pgstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// flush); a single caller sees no delay. DoTx's claim and FAILED record
// are batched like any other; what it writes inside the caller's
// transaction is not.
func WithGroupCommit(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch <= 0 {
			maxBatch = 64
		}
		s.group = &groupCommit{maxBatch: maxBatch, q: db.New(closeOnceDB{s.pool})}
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
	// q sends the batches, each closed exactly once (see closeOnceDB).
	q           *db.Queries
	claims      batchQueue[db.ClaimBatchParams, []db.ClaimBatchRow]
	transitions batchQueue[db.TransitionBatchParams, []int64]

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

// batchQueue gathers statements of one kind (arguments A, result R) for
// batches of at most maxBatch, with at most maxInFlight batches in flight.
type batchQueue[A, R any] struct {
	mu       sync.Mutex
	pending  []*batchItem[A, R]
	inFlight int
}

type batchItem[A, R any] struct {
	arg A
	res R
	err error
	// retry: the batch failed as a whole; the caller runs the statement alone.
	retry bool
	done  chan struct{}
}

// sendFunc sends one batch and calls got with each statement's result, in
// order; it returns the batch's own error (from closing it).
type sendFunc[A, R any] func(ctx context.Context, args []A, got func(i int, res R, err error)) error

// do queues arg, and waits for its batch. retry reports that the batch
// failed as a whole and nothing of it was committed.
func (q *batchQueue[A, R]) do(ctx context.Context, g *groupCommit, arg A, send sendFunc[A, R]) (res R, retry bool, err error) {
	it := &batchItem[A, R]{arg: arg, done: make(chan struct{})}
	q.mu.Lock()
	q.pending = append(q.pending, it)
	lead := q.inFlight < maxInFlight
	if lead {
		q.inFlight++
	}
	q.mu.Unlock()
	if lead {
		go q.flush(g, send)
	}
	select {
	case <-it.done:
	case <-ctx.Done():
		// The statement may still run and commit, as when a reply is lost
		// on the network: a claim is left to its lease, and the runtime's
		// retry of a completion recognises its token.
		var zero R
		return zero, false, context.Cause(ctx)
	}
	return it.res, it.retry, it.err
}

// flush sends batches until none is pending.
func (q *batchQueue[A, R]) flush(g *groupCommit, send sendFunc[A, R]) {
	for {
		q.mu.Lock()
		n := min(len(q.pending), g.maxBatch)
		if n == 0 {
			q.inFlight--
			q.mu.Unlock()
			return
		}
		batch := q.pending[:n:n]
		q.pending = q.pending[n:]
		q.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		args := make([]A, len(batch))
		for i, it := range batch {
			args[i] = it.arg
		}
		failed := false
		if err := send(ctx, args, func(i int, res R, err error) {
			batch[i].res, batch[i].err = res, err
			failed = failed || err != nil
		}); err != nil {
			failed = true
		}
		cancel()
		g.batches.Add(1)
		g.statements.Add(int64(n))
		if failed {
			g.failed.Add(1)
		}
		for _, it := range batch {
			// All or nothing: a failed batch committed nothing.
			it.retry = failed
			close(it.done)
		}
	}
}

func (s *Store) sendClaims(ctx context.Context, args []db.ClaimBatchParams, got func(int, []db.ClaimBatchRow, error)) error {
	br := s.group.q.ClaimBatch(ctx, args)
	br.Query(got)
	return br.Close()
}

func (s *Store) sendTransitions(ctx context.Context, args []db.TransitionBatchParams, got func(int, []int64, error)) error {
	br := s.group.q.TransitionBatch(ctx, args)
	br.Query(got)
	return br.Close()
}

// closeOnceDB is the pool as the group-commit mode's queries see it: the
// batch results it returns are closed exactly once, whoever asks. The
// generated code closes a batch's results when it has read them, and the
// batch's error (a failed commit, say) is learnt only from Close, so the
// results are closed again; on a pool, the first close has returned the
// connection, and a second would act on it while another goroutine uses it
// (after a failed batch it invalidates the connection's statement cache: a
// concurrent map write).
type closeOnceDB struct{ db.DBTX }

func (d closeOnceDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &closeOnceResults{BatchResults: d.DBTX.SendBatch(ctx, b)}
}

// closeOnceResults closes its batch once and remembers the error; once
// closed it answers every call with errBatchClosed (or that error) without
// touching the connection.
type closeOnceResults struct {
	pgx.BatchResults
	closed bool
	err    error
}

var errBatchClosed = errors.New("pgstore: batch already closed")

func (r *closeOnceResults) Close() error {
	if !r.closed {
		r.closed = true
		r.err = r.BatchResults.Close()
	}
	return r.err
}

func (r *closeOnceResults) closedErr() error {
	if r.err != nil {
		return r.err
	}
	return errBatchClosed
}

func (r *closeOnceResults) Exec() (pgconn.CommandTag, error) {
	if r.closed {
		return pgconn.CommandTag{}, r.closedErr()
	}
	return r.BatchResults.Exec()
}

func (r *closeOnceResults) Query() (pgx.Rows, error) {
	if r.closed {
		return nil, r.closedErr()
	}
	return r.BatchResults.Query()
}

func (r *closeOnceResults) QueryRow() pgx.Row {
	if r.closed {
		return errRow{r.closedErr()}
	}
	return r.BatchResults.QueryRow()
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// claimRows runs the claim statement, batched when group commit is on and
// q is the pool's (DoTx runs on its transaction, unbatched).
func (s *Store) claimRows(ctx context.Context, q *db.Queries, arg db.ClaimParams) ([]db.ClaimRow, error) {
	if s.group == nil || q != s.q {
		return q.Claim(ctx, arg)
	}
	res, retry, err := s.group.claims.do(ctx, s.group, db.ClaimBatchParams(arg), s.sendClaims)
	if retry {
		return q.Claim(ctx, arg)
	}
	rows := make([]db.ClaimRow, len(res))
	for i, r := range res {
		rows[i] = db.ClaimRow(r)
	}
	return rows, err
}

// transitionRows runs the transition statement, batched likewise.
func (s *Store) transitionRows(ctx context.Context, q *db.Queries, arg db.TransitionParams) ([]int64, error) {
	if s.group == nil || q != s.q {
		return q.Transition(ctx, arg)
	}
	res, retry, err := s.group.transitions.do(ctx, s.group, db.TransitionBatchParams(arg), s.sendTransitions)
	if retry {
		return q.Transition(ctx, arg)
	}
	return res, err
}
