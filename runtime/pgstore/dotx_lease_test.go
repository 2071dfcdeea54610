package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"

	"github.com/idemkit/idem/internal/overlap"
	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestDoTxLeaseRule: DoTx keeps the runtime's lease rule. A DoTx call
// whose store stops answering its renewals (or refuses them, or applies one
// and answers it late) must stop its effect before its lease can expire:
// a duplicate through runtime.Do takes the record over once it expires,
// and the two effects must never run at once. A call whose store keeps
// answering keeps its lease however its renewals are delayed. One row
// commits in every case.
func TestDoTxLeaseRule(t *testing.T) {
	const lease = 600 * time.Millisecond
	hang := func(ctx context.Context) (time.Time, error) {
		<-ctx.Done()
		return time.Time{}, fmt.Errorf("renew: %w", ctx.Err())
	}
	refused := errors.New("renew: connection refused")
	tests := []struct {
		name  string
		renew func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error)
		keeps bool // the DoTx call keeps its lease and commits
		// scale multiplies the lease: a case whose renewals take a fixed
		// share of it keeps that share with more room for a loaded
		// scheduler.
		scale time.Duration
	}{
		{"one renewal times out", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			if n == 1 {
				return hang(ctx)
			}
			return renew()
		}, true, 1},
		{"every renewal takes a third of the lease", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			select {
			case <-time.After(2 * lease / 3):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
			return renew()
		}, true, 2},
		{"the store never answers renewals", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			return hang(ctx)
		}, false, 1},
		{"the store refuses every renewal", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			return time.Time{}, refused
		}, false, 1},
		{"a renewal is applied and its reply comes late, then none answers", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			if n > 1 {
				return hang(ctx)
			}
			exp, err := renew()
			select {
			case <-time.After(lease * 45 / 100):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
			return exp, err
		}, false, 1},
	}
	p := testPool(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A case whose call keeps its lease has this much room for a
			// stalled process or a slow server: its renewals take a third of
			// the lease (or the first hangs), so a stall, or a renewal the
			// server takes longer to answer, past the rest (less the margin)
			// makes the lease unconfirmable, and stopping the effect is then
			// the rule, not a fault. Such a try is run again, up to 3 times;
			// a try that stops the effect without either fails.
			const stallAllowance = 100 * time.Millisecond
			for try := 1; ; try++ {
				starved := stall.Start()
				r := leaseRuleTry(t, p, tc.renew, lease*max(tc.scale, 1))
				worst := starved.Stop()
				if r.notStarted && try < 3 {
					t.Logf("try %d: the claim's reply came late and the effect did not start (%v): trying again", try, r.first)
					continue
				}
				if !tc.keeps {
					if !errors.Is(r.first, runtime.ErrLeaseLost) {
						t.Fatalf("DoTx: %v, want its effect stopped with ErrLeaseLost", r.first)
					}
					return
				}
				if r.first == nil && r.ran == 1 {
					return
				}
				if (worst >= stallAllowance || r.slowest >= stallAllowance) && try < 3 {
					t.Logf("try %d: the call lost its lease (%v) in a stall of %v, its slowest renewal answered in %v: trying again", try, r.first, worst, r.slowest)
					continue
				}
				t.Fatalf("the DoTx call lost a lease its store kept answering for: %v (%d effects; duplicates: %v; longest stall %v; slowest renewal %v; renewals: %s)", r.first, r.ran, r.dups, worst, r.slowest, r.story)
			}
		})
	}
}

// leaseRuleResult is what one try of a TestDoTxLeaseRule case saw.
type leaseRuleResult struct {
	first error   // the DoTx call's
	ran   int     // effects run
	dups  []error // the duplicates' errors
	// slowest is the longest a renewal the store applied took to answer
	// (the server's own time, without the case's delays); an hour for one
	// its deadline cut off before the store answered.
	slowest time.Duration
	// notStarted: the call never started its effect (a late start whose
	// confirming renewal failed).
	notStarted bool
	// story is when each renewal was asked for, applied and answered.
	story string
}

// leaseRuleTry runs one try of a TestDoTxLeaseRule case: a DoTx call on a
// store whose renewals go through renew, and duplicates through runtime.Do
// every 20 ms until it returns. It fails the test if two effects ever ran
// at once or other than one row committed.
func leaseRuleTry(t *testing.T, p *pgxpool.Pool, renew func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error),
	lease time.Duration) (r leaseRuleResult) {
	t.Helper()
	table := ordersTable(t, p)
	faulty := pgstore.New(p)
	var slowest atomic.Int64
	// The renewals' story, for a failure: when each was asked for, when
	// the store began and ended applying it, and how it ended.
	var (
		storyMu sync.Mutex
		story   []string
		begin   = time.Now()
	)
	tell := func(format string, args ...any) {
		storyMu.Lock()
		story = append(story, fmt.Sprintf("+%v ", time.Since(begin).Round(time.Millisecond))+fmt.Sprintf(format, args...))
		storyMu.Unlock()
	}
	pgstore.SetRenewHook(faulty, func(ctx context.Context, n int, apply func() (time.Time, error)) (time.Time, error) {
		tell("renewal %d asked", n)
		exp, err := renew(ctx, n, func() (time.Time, error) {
			start := time.Now()
			tell("renewal %d applying", n)
			exp, err := apply()
			d := int64(time.Since(start))
			if err != nil && ctx.Err() != nil {
				// Cut off by the renewal's deadline: the store did not
				// answer within the lease's window (a cold CI run: 83 ms
				// for a window of 75), as slow as a renewal can be.
				d = int64(time.Hour)
			}
			for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
			}
			return exp, err
		})
		tell("renewal %d answered: %v", n, err)
		return exp, err
	})
	defer func() {
		r.slowest = time.Duration(slowest.Load())
		storyMu.Lock()
		r.story = strings.Join(story, "; ")
		storyMu.Unlock()
	}()
	first, err := runtime.New(faulty, runtime.WithLease(lease), runtime.WithOwner("dotx"))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithOwner("duplicate"), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	req := orderReq{OrderID: "o-1", Amount: 7}
	var effects overlap.Effects
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, first, tx, pgstore.TxCall[orderReq, order]{
				Operation: "Orders.Create", Key: "k", Request: req,
				Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
					close(started)
					if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2)", r.OrderID, r.Amount); err != nil {
						return order{}, err
					}
					return order{Ref: r.OrderID, Amount: r.Amount}, effects.Run(ctx, 3*lease)
				},
			})
			return err
		})
	}()
	dupEffect := func(ctx context.Context, r orderReq) (order, error) {
		if err := effects.Run(ctx, 0); err != nil {
			return order{}, err
		}
		_, err := p.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2)", r.OrderID, r.Amount)
		return order{Ref: r.OrderID, Amount: r.Amount}, err
	}
	select {
	case <-started: // the duplicates start once DoTx holds the claim
	case err := <-done:
		if err != nil && strings.Contains(err.Error(), "the effect did not run") {
			// The claim's reply came so late that the call confirmed its
			// lease before starting the effect (a late start), and that
			// renewal was the case's first: as documented, the effect did
			// not run. Seen under CI's load; the try says nothing of the
			// lease rule.
			r.first, r.notStarted = err, true
			return r
		}
		t.Fatalf("DoTx returned before its effect started: %v", err)
	}
	every := time.NewTicker(20 * time.Millisecond)
	defer every.Stop()
	for returned := false; !returned; {
		select {
		case r.first = <-done:
			returned = true
		case <-every.C:
			_, err := runtime.Do(ctx, dup, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req, Effect: dupEffect})
			if err != nil && !errors.Is(err, runtime.ErrInProgress) {
				r.dups = append(r.dups, err)
			}
		}
	}
	// Once the DoTx call has returned, a duplicate gets the outcome.
	if _, err := runtime.Do(ctx, dup, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req, Effect: dupEffect}); err != nil {
		t.Fatalf("a duplicate after the DoTx call returned: %v", err)
	}
	var overlaps int
	r.ran, overlaps = effects.Counts()
	if overlaps > 0 {
		t.Fatalf("two owners ran the effect at once (%d effects; DoTx: %v; duplicates: %v)", r.ran, r.first, r.dups)
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
		t.Fatalf("%d orders committed, want 1 (DoTx: %v; duplicates: %v)", n, r.first, r.dups)
	}
	return r
}

// replyCut is a connection whose next reply, once armed, meets a
// cancellation of the caller's context on its way: the reply is read in
// full from the server (the statement was applied and committed), then
// the context is cancelled; if the driver then interrupts the read (it
// sets a deadline in the past, as pgx does for a context that ends), the
// reply is lost, otherwise it is delivered.
type replyCut struct {
	net.Conn
	armed       *atomic.Pointer[context.CancelFunc]
	interrupted atomic.Bool
	pending     []byte
}

func (c *replyCut) SetDeadline(t time.Time) error {
	if !t.IsZero() && time.Until(t) < time.Millisecond {
		c.interrupted.Store(true)
	}
	return c.Conn.SetDeadline(t)
}

func (c *replyCut) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && time.Until(t) < time.Millisecond {
		c.interrupted.Store(true)
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *replyCut) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	cancel := c.armed.Swap(nil)
	if cancel == nil {
		return c.Conn.Read(b)
	}
	// Read up to the ReadyForQuery message ('Z', length 5, status): the
	// statement's implicit transaction has committed by then.
	var reply []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Conn.Read(buf)
		reply = append(reply, buf[:n]...)
		if err != nil {
			return 0, err
		}
		if k := len(reply); k >= 6 && bytes.Equal(reply[k-6:k-1], []byte{'Z', 0, 0, 0, 5}) {
			break
		}
	}
	c.interrupted.Store(false)
	(*cancel)()
	for range 50 {
		if c.interrupted.Load() {
			return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		}
		time.Sleep(time.Millisecond)
	}
	n := copy(b, reply)
	c.pending = reply[n:]
	return n, nil
}

// TestDoTxCallerCancelledDuringClaimFreesTheKey: a caller whose context
// ends while DoTx claims, the claim applied and its reply lost, leaves no
// claim behind that holds the key: the next duplicate gets the outcome
// within its MaxWait, not ErrInProgress for the whole lease.
func TestDoTxCallerCancelledDuringClaimFreesTheKey(t *testing.T) {
	p := testPool(t)
	table := ordersTable(t, p)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Pointer[context.CancelFunc]
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &replyCut{Conn: c, armed: &armed}, nil
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec // one round trip per statement
	storePool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(storePool.Close)
	if err := storePool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	store := pgstore.New(storePool)
	pgstore.SetClaimOrder(store, -1) // the claim is one INSERT
	rt, err := runtime.New(store, runtime.WithLease(time.Minute), runtime.WithMaxWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	base := scopedCtx(t.Name())
	req := orderReq{OrderID: "o-1", Amount: 3}
	insert := func(ctx context.Context, q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, r orderReq) (order, error) {
		_, err := q.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2)", r.OrderID, r.Amount)
		return order{Ref: r.OrderID, Amount: r.Amount}, err
	}
	tx, err := p.Begin(base)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(base) }()
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	armed.Store(&cancel)
	_, derr := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req,
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) { return insert(ctx, tx, r) }})
	if armed.Load() != nil {
		t.Fatal("the claim's reply was not cut")
	}
	if !errors.Is(derr, context.Canceled) {
		t.Fatalf("DoTx: %v, want context.Canceled (the effect did not run: the caller was gone)", derr)
	}
	if err := tx.Commit(base); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := runtime.Do(base, rt, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req,
		Effect: func(ctx context.Context, r orderReq) (order, error) { return insert(ctx, p, r) }}); err != nil {
		t.Fatalf("the duplicate after DoTx (%v): %v (after %v)", derr, err, time.Since(start).Round(time.Millisecond))
	}
	if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
		t.Fatalf("%d orders committed, want 1", n)
	}
}

// TestDoTxRollbackRequiredQuotesTheEffectsError: when the caller's
// deadline passes inside the effect's statement, pgx closes the
// transaction's connection, so the savepoint cannot be rolled back: DoTx
// returns ErrRollbackRequired quoting the effect's own error (a message
// once formatted a nil panic there, losing the cause).
func TestDoTxRollbackRequiredQuotesTheEffectsError(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	base := scopedCtx(t.Name())
	tx, err := p.Begin(base)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(base) }()
	ctx, cancel := context.WithTimeout(base, 200*time.Millisecond)
	defer cancel()
	_, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: orderReq{OrderID: "o-1"},
		Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			_, err := tx.Exec(ctx, "SELECT pg_sleep(2)")
			return order{}, err
		}})
	if !errors.Is(err, pgstore.ErrRollbackRequired) {
		t.Fatalf("DoTx: %v, want ErrRollbackRequired", err)
	}
	if msg := err.Error(); strings.Contains(msg, "%!") || !strings.Contains(msg, "the effect returned: ") || strings.Contains(msg, "the effect returned: <nil>") {
		t.Fatalf("DoTx's error does not quote the effect's: %s", msg)
	}
}
