package pgstore_test

// Adversarial review 18 of group commit (WithGroupCommit): a batch stuck
// behind a lock, callers queued behind it, and two stores (two processes)
// batching the same keys on one database. Each test states the promise it
// attacks and the schedule; the schedules are deterministic (row locks held
// by the test's own transactions), except the two-store run, which is
// seeded.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/faulttest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r18Lock locks the record of id in a transaction of its own, held until
// the returned function is called.
func r18Lock(t *testing.T, p interface {
	Begin(context.Context) (pgx.Tx, error)
}, id runtime.Identity) func() {
	t.Helper()
	unlock, _ := r18LockHolder(t, p, id)
	return unlock
}

// r18LockHolder is r18Lock that also returns the backend pid of the
// transaction holding the lock, so that a test can count the statements
// waiting behind it and no one else's (other tests, and the other test
// process of scripts/test.sh on another database, wait on locks of their
// own on the same server).
func r18LockHolder(t *testing.T, p interface {
	Begin(context.Context) (pgx.Tx, error)
}, id runtime.Identity) (func(), uint32) {
	t.Helper()
	ctx := context.Background()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3 FOR UPDATE) l`,
		id.Scope, id.Operation, id.Key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("locking %v: %d rows, %v", id, n, err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	return unlock, tx.Conn().PgConn().PID()
}

// r18StuckBatch builds, on a group-commit store, a batch that is in flight
// and stuck: it holds the uncommitted INSERT of a new identity (the claim
// of claimed) and waits on a row lock for the completion of another record.
// The batch's callers are answered once the returned unlock is called.
//
// Schedule: records J1 and J2 are claimed (committed); the test locks both
// rows. A completion of J1 runs alone (nothing queued: a lone caller's own
// statement) and blocks on the lock. Meanwhile a claim of claimed and a
// completion of J2 queue behind it. J1's lock is released: J1 completes, and
// the queued claim and completion leave together as one GroupSet statement,
// whose INSERT of claimed runs and whose UPDATE of J2 blocks on the second
// lock.
func r18StuckBatch(t *testing.T, s *pgstore.Store, scope string, claimed runtime.Identity) (unlock func(), first <-chan firstClaim) {
	t.Helper()
	ctx := context.Background()
	j := func(k string) runtime.Identity { return runtime.Identity{Scope: scope, Operation: "R18.J", Key: k} }
	versions := map[string]int64{}
	for _, k := range []string{"J1", "J2"} {
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: j(k), Fingerprint: []byte("fp"), Owner: "w", Lease: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		versions[k] = res.Record.Version
	}
	unlock1 := r18Lock(t, testPool(t), j("J1"))
	unlock2 := r18Lock(t, testPool(t), j("J2"))
	complete := func(k string) {
		_, err := s.Transition(ctx, runtime.TransitionParams{ID: j(k), From: runtime.StateProcessing, To: runtime.StateSuccess,
			Owner: "w", Version: versions[k], Response: []byte(`"ok"`), TTL: time.Hour, Token: scope + "/" + k})
		if err != nil {
			t.Errorf("completion of %s: %v", k, err)
		}
	}
	go complete("J1")
	time.Sleep(150 * time.Millisecond) // J1's lone statement is in flight, blocked
	firstc := make(chan firstClaim, 1)
	go func() {
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: claimed, Fingerprint: []byte("fp"), Owner: "first", Lease: time.Hour})
		firstc <- firstClaim{res, err}
	}()
	go complete("J2")
	time.Sleep(100 * time.Millisecond) // both queued, well before the 500 ms bypass
	before, _, _ := s.GroupCommitStats()
	unlock1()
	// The batch (claim + J2's completion) leaves as soon as J1 returns.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _, _ := s.GroupCommitStats(); b > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queued batch did not leave")
		}
	}
	time.Sleep(100 * time.Millisecond) // its INSERT ran; its UPDATE waits on J2's lock
	if b, st, _ := s.GroupCommitStats(); st-b < 1 {
		t.Logf("warning: %d statements in %d batches: the claim and the completion may not share a batch", st, b)
	}
	return unlock2, firstc
}

// firstClaim is what the claim in the stuck batch was answered.
type firstClaim struct {
	res runtime.ClaimResult
	err error
}

// Promise (README, group commit; the state machine): "a caller queued
// 500 ms behind a batch that does not return runs its own statement beside
// it", and a duplicate of a call in flight is polled "up to MaxWait, then
// ErrInProgress" (or replays). Here the batch in flight holds the
// uncommitted INSERT of key K and waits on a row lock of another record.
// Attack: a runtime.Do duplicate of K (another runtime, MaxWait 300 ms, a
// context without deadline) while the lock is held 10 s. Its own claim
// withdraws after 500 ms and runs alone, but the INSERT's unique check
// waits for the stuck batch's transaction: the duplicate is neither told
// "in progress" nor answered at all until the unrelated lock goes, far past
// MaxWait + the bypass. The test allows 5 s: the lock's 10 s tell the
// fault apart, and a correct answer took 2.4 s on CI's loaded machine
// (stop 52 of 85f76f3: its claim waited out the batch's lock_timeout and
// then PostgreSQL's queue under the suite's parallel load).
//
// The same holds for a duplicate from another process (a store of its own
// on the same database, without group commit, reading first): its INSERT
// waits on the same uncommitted row.
func TestReview18GroupStuckBatchHoldsDuplicates(t *testing.T) {
	for _, dup := range []string{"same-store", "other-process"} {
		t.Run(dup, func(t *testing.T) {
			s := pgstore.New(testPool(t), pgstore.WithGroupCommit(0))
			scope := fmt.Sprintf("r18-stuck/%d", time.Now().UnixNano())
			k := runtime.Identity{Scope: scope, Operation: "R18.K", Key: "K"}
			unlock, first := r18StuckBatch(t, s, scope, k)
			ds := s
			if dup == "other-process" {
				ds = pgstore.New(r18SecondPool(t))
				pgstore.SetClaimOrder(ds, 1)
			}
			rt, err := runtime.New(ds, runtime.WithOwner("dup"), runtime.WithMaxWait(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var effects atomic.Int32
			type answer struct {
				err     error
				elapsed time.Duration
			}
			got := make(chan answer, 1)
			start := time.Now()
			go func() {
				ctx := runtime.WithScope(context.Background(), scope)
				_, err := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: k.Operation, Key: k.Key, Request: "r",
					Fingerprint: []byte("fp"),
					Effect:      func(context.Context, string) (string, error) { effects.Add(1); return "dup", nil }})
				got <- answer{err, time.Since(start)}
			}()
			const bound = 5 * time.Second // MaxWait 300 ms + the 500 ms bypass + a loaded machine's slack, half the lock's hold
			var a answer
			select {
			case a = <-got:
			case <-time.After(10 * time.Second):
				unlock()
				a = <-got
			}
			unlock()
			switch {
			case a.elapsed > bound:
				t.Errorf("a duplicate of a claim in a stuck batch (MaxWait 300 ms) was answered after %v, when the unrelated lock went (held 10 s): %v",
					a.elapsed.Round(time.Millisecond), a.err)
			case a.err != nil && !errors.Is(a.err, runtime.ErrInProgress):
				t.Errorf("the duplicate was told %v; want ErrInProgress or the replay", a.err)
			}
			// Since the fix, the batch gives up its lock wait (GroupSet's
			// lock_timeout) and commits nothing: the duplicate may then
			// claim K first. Exactly one of the two may hold it.
			f := <-first
			n := effects.Load()
			switch {
			case f.err != nil:
				t.Errorf("the first claim: %v", f.err)
			case f.res.Claimed && n != 0:
				t.Errorf("the duplicate ran its effect %d times while the first claim held the key", n)
			case !f.res.Claimed && (n != 1 || f.res.Record.Owner != "dup" && !strings.HasPrefix(f.res.Record.Token, "dup#")):
				t.Errorf("the first claim was not granted, the duplicate ran %d times; the first claim saw %+v", n, f.res.Record)
			}
		})
	}
}

// Promise: the bypass. A claim of an unrelated new identity queued behind
// the same stuck batch runs alone after about 500 ms and is granted; a
// claim whose context ends before the bypass is withdrawn and leaves no
// record.
func TestReview18GroupStuckBatchBypass(t *testing.T) {
	s := pgstore.New(testPool(t), pgstore.WithGroupCommit(0))
	scope := fmt.Sprintf("r18-bypass/%d", time.Now().UnixNano())
	unlock, first := r18StuckBatch(t, s, scope, runtime.Identity{Scope: scope, Operation: "R18.K", Key: "K"})
	defer unlock()
	other := runtime.Identity{Scope: scope, Operation: "R18.K", Key: "other"}
	gone := runtime.Identity{Scope: scope, Operation: "R18.K", Key: "gone"}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		start := time.Now()
		res, err := s.Claim(context.Background(), runtime.ClaimParams{ID: other, Fingerprint: []byte("fp"), Owner: "o", Lease: time.Hour})
		if d := time.Since(start); err != nil || !res.Claimed || d > 2*time.Second {
			t.Errorf("a claim of an unrelated key behind a stuck batch: claimed %v, %v after %v; want granted after about 500 ms",
				res.Claimed, err, d.Round(time.Millisecond))
		}
	}()
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: gone, Fingerprint: []byte("fp"), Owner: "o", Lease: time.Hour})
		// Since GroupSet's lock_timeout, the stuck batch fails after 200 ms
		// of waiting and the queue may drain before this deadline: then
		// the claim is granted. Told its context ended, it left nothing.
		_, gerr := s.Get(context.Background(), gone)
		switch {
		case err == nil && res.Claimed:
			if gerr != nil {
				t.Errorf("a granted claim left no record: %v", gerr)
			}
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("a claim whose context ended in the queue: %v, %+v; want its context's error or the claim", err, res)
		case !errors.Is(gerr, runtime.ErrNotFound):
			t.Errorf("a claim told %q left a record: %v", context.DeadlineExceeded, gerr)
		}
	}()
	wg.Wait()
	unlock()
	if f := <-first; f.err != nil || !f.res.Claimed {
		t.Errorf("the first claim: %+v, %v", f.res, f.err)
	}
}

// Promise: exactly-once effect and "a duplicate in flight waits (bounded)
// or is told still processing, never a false success or failure", with two
// processes batching the same keys on one database. Schedule (seeded):
// two group-commit stores on one database (two pools: two processes), each
// with its runtime (owners A and B, lease 2 s, MaxWait 1 s); per round, 6
// keys, 12 callers per store per key released at once, each retrying
// ErrInProgress until it is told the outcome; the effect sleeps 0-20 ms and
// counts per key, one key in three fails permanently. Every caller must
// get the one outcome of its key (the response of the one effect, or its
// FailedError), and each key's effect must run once.
func TestReview18GroupTwoStoresSameKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2))
	p1 := testPool(t)
	p2 := r18SecondPool(t)
	var rts []*runtime.Runtime
	var stores []*pgstore.Store
	for i, p := range []*pgxpool.Pool{p1, p2} {
		s := pgstore.New(p, pgstore.WithGroupCommit(0))
		rt, err := runtime.New(s, runtime.WithOwner(fmt.Sprint("proc-", i)), runtime.WithLease(2*time.Second), runtime.WithMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rts, stores = append(rts, rt), append(stores, s)
	}
	ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r18-two/%d", time.Now().UnixNano()))
	const rounds, keys, callers = 4, 6, 12
	for round := range rounds {
		var effects [keys]atomic.Int32
		var mu sync.Mutex
		told := make([]map[string]int, keys)
		for k := range told {
			told[k] = map[string]int{}
		}
		delays := make([]time.Duration, keys)
		for k := range delays {
			delays[k] = time.Duration(rng.IntN(20)) * time.Millisecond
		}
		together(2*keys*callers, func(i int) {
			k, proc := i%keys, (i/keys)%2
			key := fmt.Sprintf("r%d-k%d", round, k)
			for try := 0; ; try++ {
				v, err := runtime.Do(ctx, rts[proc], runtime.Call[string, string]{Operation: "R18.Two", Key: key, Request: key,
					Effect: func(context.Context, string) (string, error) {
						n := effects[k].Add(1)
						time.Sleep(delays[k])
						if k%3 == 2 {
							return "", runtime.Permanent(fmt.Errorf("declined %s (run %d)", key, n))
						}
						return fmt.Sprintf("%s by proc-%d (run %d)", key, proc, n), nil
					}})
				if errors.Is(err, runtime.ErrInProgress) && try < 50 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var fe *runtime.FailedError
				outcome := v
				switch {
				case err == nil:
				case errors.As(err, &fe), errors.Is(err, runtime.ErrPermanent) && k%3 == 2:
					outcome = "failed: " + r18FailureText(err)
				default:
					outcome = "error: " + err.Error()
				}
				mu.Lock()
				told[k][outcome]++
				mu.Unlock()
				return
			}
		})
		for k := range keys {
			if n := effects[k].Load(); n != 1 {
				t.Errorf("round %d key %d: the effect ran %d times", round, k, n)
			}
			if len(told[k]) != 1 {
				t.Errorf("round %d key %d: callers were told %v; want one outcome", round, k, told[k])
			}
		}
	}
	for i, s := range stores {
		b, st, f := s.GroupCommitStats()
		t.Logf("store %d: %d statements in %d batches, %d failed", i, st, b, f)
	}
}

// r18FailureText is the message of a permanent failure, first-hand or
// replayed, without the wrapping that says which it was.
func r18FailureText(err error) string {
	var fe *runtime.FailedError
	if errors.As(err, &fe) {
		return fe.Message
	}
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
		err = u
	}
	return err.Error()
}

// r18SecondPool is a pool of its own on the test database: another
// process's connections.
func r18SecondPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	testPool(t) // migrated
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Promise (README, the state machine; queries/group.sql): "a completion
// whose reply was lost (connection reset after the commit) recognises its
// own write on the retry and returns the response, instead of
// ErrLeaseLost": a retry of a write that was applied comes back with the
// record's version.
//
// Schedule: record K is claimed; another transaction locks K's row.
// Attempt 1 of K's completion (token T) goes through a proxy and blocks on
// the lock; the proxy then holds everything the client sends (so pgx's
// cancel request, sent when the client gives up after 300 ms, never
// arrives: a network partition), and the server keeps the statement,
// waiting. Attempt 2, the same write with the same token, is sent directly
// and blocks behind it. The lock goes: attempt 1 applies and commits;
// attempt 2's compare-and-set then finds the version changed. Without
// group commit the token lookup is a statement of its own
// (TransitionApplied) and finds T; with group commit it is part of the
// same statement (Transition's or GroupSet's UNION ALL), on the snapshot
// taken before attempt 1 committed, and attempt 2 is told ErrLeaseLost
// while the record holds its own SUCCESS: the runtime would answer the
// caller ErrLeaseLost for a call whose outcome it recorded.
func TestReview18GroupRetryBehindItsOwnWrite(t *testing.T) {
	r18Modes(t, func(t *testing.T, opts ...pgstore.Option) {
		direct := pgstore.New(testPool(t), opts...)
		proxy, proxied := proxiedPool(t)
		first := pgstore.New(proxied)
		ctx := context.Background()
		id := runtime.Identity{Scope: fmt.Sprintf("r18-retry/%d", time.Now().UnixNano()), Operation: "R18.Retry", Key: "K"}
		res, err := direct.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "w", Lease: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		if _, err := first.Get(ctx, id); err != nil { // a proxied connection, open
			t.Fatal(err)
		}
		unlock, holder := r18LockHolder(t, testPool(t), id)
		tp := runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess, Owner: "w",
			Version: res.Record.Version, Response: []byte(`"ok"`), TTL: time.Hour, Token: "w#attempt"}
		go func() {
			time.Sleep(100 * time.Millisecond) // attempt 1 reached the server
			if err := proxy.Add(faulttest.Toxic{Name: "partition", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}}); err != nil {
				t.Error(err)
			}
		}()
		c1, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err1 := first.Transition(c1, tp)
		cancel()
		defer proxy.Remove("partition")
		if err1 == nil {
			t.Fatal("attempt 1 returned while the row was locked")
		}
		second := make(chan error, 1)
		go func() {
			_, err := direct.Transition(ctx, tp)
			second <- err
		}()
		time.Sleep(300 * time.Millisecond) // attempt 2 waits behind attempt 1
		var waiting int
		// The statements waiting behind the lock's holder, directly or
		// behind another waiter (attempt 2 may wait on attempt 1's tuple
		// lock): a count of every statement waiting on a lock would count
		// those of the tests running beside this one.
		if err := testPool(t).QueryRow(ctx, `WITH RECURSIVE w(pid) AS (
				SELECT pid FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))
				UNION SELECT a.pid FROM pg_stat_activity a JOIN w ON w.pid = ANY(pg_blocking_pids(a.pid)))
			SELECT count(*) FROM w`, int32(holder)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting != 2 {
			t.Fatalf("%d statements wait on the lock; the schedule needs both attempts waiting", waiting)
		}
		unlock()
		err2 := <-second
		rec, err := direct.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("attempt 1: %v; attempt 2: %v; record %s, token %q", err1, err2, rec.State, rec.Token)
		if rec.State == runtime.StateSuccess && rec.Token == tp.Token && err2 != nil {
			t.Errorf("the retry of a completion applied by its first attempt was told %v; the record holds that write (SUCCESS, its token)", err2)
		}
	})
}

// Measurement, not a promise: replays of one hot key with group commit.
// Every claim goes through the batch first (the read-first guess is off in
// group mode) and a batch carries an identity once, so 32 concurrent
// replays of one key need 32 batches, one after another. Asserts only that
// each gets the stored response; logs the statements, batches and time of
// each mode.
func TestReview18GroupHotKeyReplays(t *testing.T) {
	r18Modes(t, func(t *testing.T, opts ...pgstore.Option) {
		p := testPool(t)
		s := pgstore.New(p, opts...)
		rt, err := runtime.New(s)
		if err != nil {
			t.Fatal(err)
		}
		ctx := scopedCtx(t.Name())
		call := runtime.Call[string, string]{Operation: "R18.Hot", Key: "hot", Request: "r",
			Effect: func(context.Context, string) (string, error) { return "stored", nil }}
		if _, err := runtime.Do(ctx, rt, call); err != nil {
			t.Fatal(err)
		}
		b0, s0, _ := s.GroupCommitStats()
		var worst atomic.Int64
		start := time.Now()
		for range 5 {
			together(32, func(int) {
				t0 := time.Now()
				if v, err := runtime.Do(ctx, rt, call); err != nil || v != "stored" {
					t.Errorf("replay: %q, %v", v, err)
				}
				if d := int64(time.Since(t0)); d > worst.Load() {
					worst.Store(d)
				}
			})
		}
		b1, s1, _ := s.GroupCommitStats()
		t.Logf("5 x 32 concurrent replays of one key: %v in all, slowest replay %v; batched claims %d in %d batches",
			time.Since(start).Round(time.Millisecond), time.Duration(worst.Load()).Round(time.Microsecond), s1-s0, b1-b0)
	})
}

// r18Modes runs f without and with group commit, as subtests.
func r18Modes(t *testing.T, f func(t *testing.T, opts ...pgstore.Option)) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprint("group=", group), func(t *testing.T) {
			var opts []pgstore.Option
			if group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			f(t, opts...)
		})
	}
}

// r18FirstTransitionVia sends the first Transition through first, with a
// 300 ms socket timeout of its own, and everything else to the embedded
// store: one store whose first completion's connection was partitioned.
type r18FirstTransitionVia struct {
	*pgstore.Store
	first *pgstore.Store
	sent  atomic.Bool
}

func (s *r18FirstTransitionVia) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.sent.CompareAndSwap(false, true) {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return s.first.Transition(c, p)
	}
	return s.Store.Transition(ctx, p)
}

// Promise (README, the state machine and Errors): a completion whose reply
// was lost "recognises its own write on the retry and returns the
// response, instead of ErrLeaseLost"; ErrLeaseLost means "this worker's
// lease was taken over, so its outcome was not recorded". The runtime-level
// form of TestReview18GroupRetryBehindItsOwnWrite: runtime.Do on a
// group-commit store; the effect succeeds while another transaction holds
// the record's row; the completion's first attempt blocks on it and its
// connection is then partitioned (its reply, and pgx's cancel request, never
// arrive), so the runtime retries with the same token; the row is freed.
// The caller must get its response (or ErrNotRecorded with it), never
// ErrLeaseLost for an outcome the store holds.
func TestReview18GroupRetryBehindItsOwnWriteRuntime(t *testing.T) {
	r18Modes(t, func(t *testing.T, opts ...pgstore.Option) {
		direct := pgstore.New(testPool(t), opts...)
		proxy, proxied := proxiedPool(t)
		store := &r18FirstTransitionVia{Store: direct, first: pgstore.New(proxied)}
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		scope := fmt.Sprintf("r18-retry-rt/%d", time.Now().UnixNano())
		id := runtime.Identity{Scope: scope, Operation: "R18.RetryRT", Key: "K"}
		if _, err := store.first.Get(context.Background(), id); !errors.Is(err, runtime.ErrNotFound) { // a proxied connection, open
			t.Fatal(err)
		}
		defer proxy.Remove("partition")
		got, err := runtime.Do(runtime.WithScope(context.Background(), scope), rt, runtime.Call[string, string]{Operation: id.Operation, Key: id.Key, Request: "r",
			Effect: func(context.Context, string) (string, error) {
				unlock := r18Lock(t, testPool(t), id)
				go func() {
					time.Sleep(100 * time.Millisecond) // the first attempt reached the server and waits
					if err := proxy.Add(faulttest.Toxic{Name: "partition", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}}); err != nil {
						t.Error(err)
					}
					time.Sleep(600 * time.Millisecond) // the retry waits behind it
					unlock()
				}()
				return "receipt", nil
			}})
		rec, gerr := direct.Get(context.Background(), id)
		if gerr != nil {
			t.Fatal(gerr)
		}
		t.Logf("caller told %q, %v; record %s, response %s", got, err, rec.State, rec.Response)
		if rec.State == runtime.StateSuccess && errors.Is(err, runtime.ErrLeaseLost) {
			t.Errorf("the caller was told %v (no response) for a call whose SUCCESS the store recorded", err)
		}
	})
}
