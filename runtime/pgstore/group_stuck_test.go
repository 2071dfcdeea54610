package pgstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestGroupCommitStuckBatchHoldsUpOnlyItsCallers: a batch whose reply is
// held on the wire, its connection open (a partition the TCP connection
// survives), waits for its outcome up to the batch timeout (30 s), and so
// do its own callers; callers who come later must not pay for it. Each new
// caller of the store used to queue behind the stuck batch and wait half a
// second before it ran its statement alone, so that for the batch's whole
// 30 s a client with a deadline of a second or less lost half of it on
// every call, or all of it when its deadline was shorter.
func TestGroupCommitStuckBatchHoldsUpOnlyItsCallers(t *testing.T) {
	hold := &replyHold{}
	p := heldPool(t, hold)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	claim := newClaimer(s, "stuck")
	// Idle connections ready, so that the later claims need no new one.
	var warm sync.WaitGroup
	for i := range 6 {
		warm.Go(func() {
			if err := claim(context.Background(), fmt.Sprintf("warm-%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	warm.Wait()
	_, before, _ := s.GroupCommitStats()

	// Replies held: a lone claim on a short deadline, and two queued
	// behind it, which leave as one batch when the lone one gives up; the
	// batch's reply is held until the end of the test.
	release := hold.start()
	var stuck sync.WaitGroup
	defer stuck.Wait()
	defer release()
	lone, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stuck.Go(func() { _ = claim(lone, "lone") })
	time.Sleep(50 * time.Millisecond)
	for i := range 2 {
		stuck.Go(func() {
			if err := claim(context.Background(), fmt.Sprintf("batched-%d", i)); err != nil {
				t.Errorf("batched claim %d: %v", i, err)
			}
		})
	}
	for {
		if _, n, _ := s.GroupCommitStats(); n >= before+3 {
			break // the batch of two is in flight
		}
		time.Sleep(10 * time.Millisecond)
	}
	hold.stop() // later reads go through; the batch's stays held
	// Let the stuck batch be older than any wait a queued caller makes.
	time.Sleep(time.Second)

	// Callers with a deadline shorter than a queued caller's wait must get
	// through while the batch is stuck. A loaded machine can make one
	// statement slower than 400 ms on its own, several in a row (CI's
	// fresh machine once failed four in a row beside the other suites):
	// a caller may try eight times (a new key each time). Queued behind
	// the stuck batch, every try waited half a second and failed.
	for i := range 5 {
		var err error
		for try := range 8 {
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			err = claim(ctx, fmt.Sprintf("later-%d-%d", i, try))
			cancel()
			if err == nil {
				break
			}
			t.Logf("claim %d beside the stuck batch, try %d: %v", i, try, err)
		}
		if err != nil {
			t.Fatalf("claim %d beside the stuck batch: %v", i, err)
		}
	}
}

// TestGroupCommitBatchEndsWithItsCallersDeadlines: a caller whose
// statement left in a batch waits for the batch's outcome; the batch waits
// for its reply until the latest of its callers' deadlines. It used to wait
// up to its own 30 s timeout, so that a completion queued behind another
// statement for an instant, then sent with a reply held, kept its caller
// (and, in the toxiproxy workload, the fault tied to that call) 30 s past a
// completion timeout of a second.
func TestGroupCommitBatchEndsWithItsCallersDeadlines(t *testing.T) {
	hold := &replyHold{}
	p := heldPool(t, hold)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	claim := newClaimer(s, "deadline")
	if err := claim(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	_, before, _ := s.GroupCommitStats()
	release := hold.start()
	defer release()
	// A lone claim, its reply held, gives up after 200 ms; the claim queued
	// behind it leaves then, alone in its batch, and its reply is held too.
	var wg sync.WaitGroup
	defer wg.Wait()
	first, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	wg.Go(func() { _ = claim(first, "first") })
	time.Sleep(50 * time.Millisecond) // the first claim's statement in flight
	queued, cancel2 := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel2()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- claim(queued, "queued") }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the queued claim succeeded while every reply was held")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("the queued claim returned after %v, its deadline 600 ms: %v", took, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued claim, deadline 600 ms, still waits for its batch after 10 s")
	}
	if _, n, _ := s.GroupCommitStats(); n < before+2 {
		t.Fatalf("the second claim never left in a batch (%d statements): the schedule did not happen", n-before)
	}
}

// newClaimer returns what claims keys of a scope of its own on s.
func newClaimer(s *pgstore.Store, name string) func(ctx context.Context, key string) error {
	scope := fmt.Sprintf("%s/%d", name, time.Now().UnixNano())
	return func(ctx context.Context, key string) error {
		_, err := s.Claim(ctx, runtime.ClaimParams{
			ID:          runtime.Identity{Scope: scope, Operation: "Group.Op", Key: key},
			Fingerprint: []byte("fp"), Owner: "w", Lease: time.Minute,
		})
		return err
	}
}

// replyHold holds the replies of a pool's connections: a read that starts
// while the hold is on waits until the hold's release (or the read's
// deadline, as a connection whose peer stays silent), its connection open.
type replyHold struct {
	gate atomic.Pointer[chan struct{}]
}

// start turns the hold on and returns what releases the reads it held.
func (h *replyHold) start() (release func()) {
	ch := make(chan struct{})
	h.gate.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// stop lets reads that start from now on through.
func (h *replyHold) stop() { h.gate.Store(nil) }

// heldPool is a pool of its own on the test server whose connections obey
// hold.
func heldPool(t *testing.T, hold *replyHold) *pgxpool.Pool {
	t.Helper()
	testPool(t) // migrated
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heldConn{Conn: c, hold: hold}, nil
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type heldConn struct {
	net.Conn
	hold     *replyHold
	deadline atomic.Pointer[time.Time]
}

func (c *heldConn) SetDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *heldConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

func (c *heldConn) Read(b []byte) (int, error) {
	if gate := c.hold.gate.Load(); gate != nil {
		for {
			select {
			case <-*gate:
				return c.Conn.Read(b)
			case <-time.After(time.Millisecond):
			}
			if d := c.deadline.Load(); d != nil && !d.IsZero() && time.Now().After(*d) {
				return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			}
		}
	}
	return c.Conn.Read(b)
}
