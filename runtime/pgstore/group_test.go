package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/faulttest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest"
	"github.com/idemkit/idem/runtime/storetest/sim"
)

// The whole conformance suite, with claims and completions batched.
func TestConformanceGroupCommit(t *testing.T) {
	p := testPool(t)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	storetest.Run(t, func(t *testing.T) runtime.Store { return s })
}

// TestGroupCommitFailedBatchCommitsNothingAndRetries: a row that fails
// makes PostgreSQL roll its whole batch back; the others must be run again
// on their own, and each caller gets its own result. The schedule is run
// until the invalid claim shared a batch (it may also be sent alone, by a
// caller that found no batch in flight).
func TestGroupCommitFailedBatchCommitsNothingAndRetries(t *testing.T) {
	p := testPool(t)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	ctx := context.Background()
	for try := 0; ; try++ {
		if _, _, failed := s.GroupCommitStats(); failed > 0 {
			break
		}
		if try == 20 {
			t.Fatal("no batch failed in 20 tries: the invalid claim always travelled alone, the schedule was not reproduced")
		}
		scope := fmt.Sprintf("%s/%d/%d", t.Name(), time.Now().UnixNano(), try)
		const n = 40
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		claimed := make([]bool, n+1)
		start := make(chan struct{})
		for i := range n + 1 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := runtime.Identity{Scope: scope, Operation: "Group.Op", Key: fmt.Sprint("k", i)}
				if i == n {
					id.Scope = scope + "\xff" // not UTF-8: PostgreSQL refuses the statement
				}
				<-start
				res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "w", Lease: time.Minute})
				errs[i], claimed[i] = err, res.Claimed
			}()
		}
		close(start)
		wg.Wait()
		if errs[n] == nil {
			t.Fatal("the invalid claim succeeded")
		}
		for i := range n {
			if errs[i] != nil || !claimed[i] {
				t.Fatalf("claim %d: claimed=%v, %v", i, claimed[i], errs[i])
			}
		}
		if got := count(t, p, "SELECT count(*) FROM idem_records WHERE scope = $1", scope); got != n {
			t.Fatalf("%d records committed, want %d", got, n)
		}
	}
	batches, statements, failed := s.GroupCommitStats()
	t.Logf("%d batches, %d statements, %d failed batches", batches, statements, failed)
	if statements <= batches {
		t.Fatalf("%d statements in %d batches: nothing was batched", statements, batches)
	}
}

// TestGroupCommitFailingBatchesManyCallers: many callers claim and complete
// at once while batches keep failing (an invalid statement in a claim batch
// or in a completion batch; rows contended by several batches, which can
// deadlock). Each failed batch's connection goes back to the pool and is at
// once used by others: under -race, any use of a batch or its connection
// after release (a second close invalidating the connection's statement
// cache) is reported. Every caller must still get its own result.
func TestGroupCommitFailingBatchesManyCallers(t *testing.T) {
	testPool(t) // migrated
	// A pool of its own, small, so that a connection a batch released is
	// at once taken by another user.
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s := pgstore.New(p, pgstore.WithGroupCommit(8))
	ctx := context.Background()
	scope := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	const workers, rounds = 32, 12
	bad := func(w, r int) bool { return (w*rounds+r)%7 == 3 }

	// One contended record per round: every worker tries to complete it
	// from the same version; exactly one compare-and-set wins.
	shared := make([]runtime.ClaimResult, rounds)
	for r := range rounds {
		var err error
		shared[r], err = s.Claim(ctx, runtime.ClaimParams{ID: runtime.Identity{Scope: scope, Operation: "Group.Shared", Key: fmt.Sprint("s", r)},
			Fingerprint: []byte("fp"), Owner: "w", Lease: time.Minute})
		if err != nil || !shared[r].Claimed {
			t.Fatalf("claiming shared record %d: %+v, %v", r, shared[r], err)
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []string
		wins     = make([]int, rounds)
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	stop := make(chan struct{})
	// Other users of the pool take each connection a batch released and
	// prepare statements on it (each its own text), writing the
	// connection's statement cache.
	var readers sync.WaitGroup
	for g := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				if err := p.QueryRow(ctx, fmt.Sprintf("SELECT %d /* reader %d */", i, g)).Scan(&n); err != nil {
					report("reader: %v", err)
					return
				}
				if _, err := s.Get(ctx, shared[0].Record.ID); err != nil {
					report("get: %v", err)
					return
				}
			}
		}()
	}
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				id := runtime.Identity{Scope: scope, Operation: "Group.Op", Key: fmt.Sprintf("w%d-r%d", w, r)}
				if bad(w, r) {
					id.Scope = scope + "\xff" // not UTF-8: PostgreSQL refuses the statement, failing its batch
				}
				res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "w", Lease: time.Minute})
				switch {
				case bad(w, r):
					if err == nil {
						report("invalid claim %v succeeded", id)
					}
					continue
				case err != nil || !res.Claimed:
					report("claim %v: claimed=%v, %v", id, res.Claimed, err)
					continue
				}
				// An invalid completion fails its batch too: a token that is
				// not UTF-8 (a note no longer does: pgstore stores notes as
				// valid UTF-8 since review r54).
				token, invalid := fmt.Sprintf("t-%d-%d", w, r), (w+r)%5 == 0
				if invalid {
					token += "\xff"
				}
				v, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w",
					Version: res.Record.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(`"ok"`), Note: "\xff",
					Token: token})
				switch {
				case invalid:
					if err == nil {
						report("invalid completion of %v succeeded", id)
					}
				case err != nil || v <= res.Record.Version:
					report("completing %v: version %d, %v", id, v, err)
				}
				sh := shared[r].Record
				_, err = s.Transition(ctx, runtime.TransitionParams{ID: sh.ID, From: runtime.StateProcessing, Owner: "w",
					Version: sh.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(fmt.Sprintf("%d", w))})
				switch {
				case err == nil:
					mu.Lock()
					wins[r]++
					mu.Unlock()
				case !errors.Is(err, runtime.ErrLeaseLost):
					report("completing shared %d: %v", r, err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(stop)
	readers.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	for r, n := range wins {
		if n != 1 {
			t.Errorf("shared record %d: %d winning completions, want 1", r, n)
		}
	}
	for w := range workers {
		for r := range rounds {
			if bad(w, r) {
				continue
			}
			id := runtime.Identity{Scope: scope, Operation: "Group.Op", Key: fmt.Sprintf("w%d-r%d", w, r)}
			rec, err := s.Get(ctx, id)
			want := runtime.StateSuccess
			if (w+r)%5 == 0 {
				want = runtime.StateProcessing
			}
			if err != nil || rec.State != want {
				t.Errorf("%v: %s, %v; want %s", id, rec.State, err, want)
			}
		}
	}
	batches, statements, failed := s.GroupCommitStats()
	t.Logf("%d batches, %d statements, %d failed batches", batches, statements, failed)
	if failed == 0 || statements <= batches {
		t.Fatalf("%d failed of %d batches carrying %d statements: the schedule (batched statements, failing batches) was not reproduced", failed, batches, statements)
	}
}

// TestSimulationGroupCommit runs the fault-injecting simulation (see
// TestSimulation) on a group-commit store: claims and completions of the
// simulated callers travel in set-based batches.
func TestSimulationGroupCommit(t *testing.T) {
	p := testPool(t)
	sim.Runs(t, 1, func(t *testing.T, seed uint64) {
		const limit = 4096
		s := pgstore.New(p, pgstore.WithMaxRecordBytes(limit), pgstore.WithGroupCommit(0))
		sim.Run(t, sim.Config{Name: "pgstore-group", Store: s, Seed: seed, Requests: 140, RecordLimit: limit})
		batches, statements, failed := s.GroupCommitStats()
		t.Logf("group commit: %d batches, %d statements, %d failed batches", batches, statements, failed)
	})
}

// TestNetworkFaultsGroupCommit runs TestNetworkFaults' workload (faults on
// the wire: held, reset and sliced replies, before and after the server
// applied a statement) on a group-commit store: a batch whose reply is lost
// after it committed is rerun statement by statement, and a completion
// rerun recognises its token.
func TestNetworkFaultsGroupCommit(t *testing.T) {
	direct := testPool(t)
	proxy, proxied := proxiedPool(t)
	s := pgstore.New(proxied, pgstore.WithGroupCommit(0))
	faulttest.Run(t, faulttest.Target{Proxied: s, Direct: pgstore.New(direct), Proxies: []*faulttest.Proxy{proxy}}, faulttest.Config{})
	batches, statements, failed := s.GroupCommitStats()
	t.Logf("group commit: %d batches, %d statements, %d failed batches", batches, statements, failed)
	if statements <= batches {
		t.Errorf("%d statements in %d batches: nothing was batched", statements, batches)
	}
}
