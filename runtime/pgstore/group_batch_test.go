package pgstore

// White-box schedules of the set-based group commit: each test puts its
// callers in the queue itself and sends them as the sender would, so that
// which rows share a statement is decided by the test, not by timing.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore/internal/db"
)

var (
	batchPoolOnce sync.Once
	batchPool     *pgxpool.Pool
	batchPoolErr  error
)

// groupStore returns a group-commit store on a migrated pool, and a scope
// of the test's own.
func groupStore(t *testing.T) (*Store, string) {
	t.Helper()
	url := testenv.PostgresURL(t)
	batchPoolOnce.Do(func() {
		ctx := context.Background()
		batchPool, batchPoolErr = pgxpool.New(ctx, url)
		if batchPoolErr == nil {
			batchPoolErr = Migrate(ctx, batchPool)
		}
	})
	if batchPoolErr != nil {
		t.Fatal(batchPoolErr)
	}
	return New(batchPool, WithGroupCommit(0)), fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// sendQueued queues claims and completions as their callers would, then
// sends the queue as the sender does (flush), and returns each caller's
// answer. Rows that may share a statement do, unless take keeps them apart.
func (s *Store) sendQueued(cids []runtime.Identity, cargs []db.ClaimParams, tids []runtime.Identity, targs []db.TransitionParams) (
	[]*batchItem[db.ClaimParams, []db.ClaimRow], []*batchItem[db.TransitionParams, []int64]) {
	g := s.group
	claims := make([]*batchItem[db.ClaimParams, []db.ClaimRow], len(cargs))
	transitions := make([]*batchItem[db.TransitionParams, []int64], len(targs))
	g.mu.Lock()
	g.busy = true // the slot flush frees
	for i := range cargs {
		claims[i] = &batchItem[db.ClaimParams, []db.ClaimRow]{id: cids[i], arg: cargs[i], done: make(chan struct{})}
		g.claims = append(g.claims, claims[i])
	}
	for i := range targs {
		transitions[i] = &batchItem[db.TransitionParams, []int64]{id: tids[i], arg: targs[i], done: make(chan struct{})}
		g.transitions = append(g.transitions, transitions[i])
	}
	g.mu.Unlock()
	g.flush(s)
	for _, it := range claims {
		<-it.done // each caller answered exactly once (a second close panics)
	}
	for _, it := range transitions {
		<-it.done
	}
	return claims, transitions
}

func claimArg(scope, key, owner string) (runtime.Identity, db.ClaimParams) {
	id := runtime.Identity{Scope: scope, Operation: "Batch.Op", Key: key}
	return id, db.ClaimParams{Scope: id.Scope, Operation: id.Operation, Key: id.Key,
		Fingerprint: []byte("fp"), Owner: owner, Lease: interval(time.Minute), Request: []byte(`{}`)}
}

func (s *Store) queueClaims(ids []runtime.Identity, args []db.ClaimParams) []*batchItem[db.ClaimParams, []db.ClaimRow] {
	c, _ := s.sendQueued(ids, args, nil, nil)
	return c
}

func (s *Store) queueTransitions(ids []runtime.Identity, args []db.TransitionParams) []*batchItem[db.TransitionParams, []int64] {
	_, t := s.sendQueued(nil, nil, ids, args)
	return t
}

// TestGroupClaimBatches: each caller of a claim batch gets its own claim
// or the existing record, whatever shares its statement.
func TestGroupClaimBatches(t *testing.T) {
	type caller struct {
		key, owner string
		// want: claimed, and the owner of the record returned (the
		// caller's, or the existing record's); retry: the batch failed as a
		// whole and the caller runs its claim alone.
		claimed bool
		holder  string
		retry   bool
	}
	tests := []struct {
		name string
		// existing keys, claimed by "old" before the batch
		existing []string
		callers  []caller
		batches  int64
	}{
		{"duplicate keys in one batch are never both claimed", nil, []caller{
			{key: "k1", owner: "a", claimed: true, holder: "a"},
			{key: "k1", owner: "b", holder: "a"},
			{key: "k2", owner: "b", claimed: true, holder: "b"},
			{key: "k1", owner: "c", holder: "a"},
		}, 3},
		{"replays beside first claims", []string{"k0"}, []caller{
			{key: "k3", owner: "a", claimed: true, holder: "a"},
			{key: "k0", owner: "a", holder: "old"},
		}, 1},
		{"a row PostgreSQL refuses fails the batch, and nothing of it commits", nil, []caller{
			{key: "k4", owner: "a", retry: true},
			{key: "bad\xff", owner: "a", retry: true},
		}, 1},
		{"a key the table's check refuses fails the batch", nil, []caller{
			{key: "k5", owner: "a", retry: true},
			{key: "", owner: "a", retry: true},
		}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, scope := groupStore(t)
			ctx := context.Background()
			for _, k := range tc.existing {
				_, arg := claimArg(scope, k, "old")
				if _, err := s.q.Claim(ctx, arg); err != nil {
					t.Fatal(err)
				}
			}
			ids := make([]runtime.Identity, len(tc.callers))
			args := make([]db.ClaimParams, len(tc.callers))
			for i, c := range tc.callers {
				ids[i], args[i] = claimArg(scope, c.key, c.owner)
			}
			items := s.queueClaims(ids, args)
			for i, c := range tc.callers {
				it := items[i]
				switch {
				case it.err != nil:
					t.Errorf("caller %d (%s): %v", i, c.key, it.err)
				case it.retry != c.retry:
					t.Errorf("caller %d (%s): retry %v, want %v", i, c.key, it.retry, c.retry)
				case c.retry:
				case len(it.res) != 1:
					t.Errorf("caller %d (%s): %d rows", i, c.key, len(it.res))
				case it.res[0].Claimed != c.claimed || it.res[0].Owner != c.holder || it.res[0].Key != c.key:
					t.Errorf("caller %d (%s): claimed %v, record of %s (key %q); want claimed %v, record of %s",
						i, c.key, it.res[0].Claimed, it.res[0].Owner, it.res[0].Key, c.claimed, c.holder)
				}
			}
			var n int
			if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM idem_records WHERE scope = $1", scope).Scan(&n); err != nil {
				t.Fatal(err)
			}
			want := len(tc.existing)
			for i, c := range tc.callers {
				if c.claimed && !c.retry && items[i].res[0].Claimed {
					want++
				}
			}
			if n != want {
				t.Errorf("%d records committed, want %d", n, want)
			}
			if b, _, _ := s.GroupCommitStats(); b != tc.batches {
				t.Errorf("%d batches sent, want %d", b, tc.batches)
			}
		})
	}
}

// claimInOpenTx claims key for owner in a transaction it leaves open (and
// rolls back when the test ends): an insert other claims of the identity
// wait on.
func claimInOpenTx(t *testing.T, s *Store, scope, key, owner string) (pgx.Tx, runtime.Identity) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	id, arg := claimArg(scope, key, owner)
	if _, err := s.q.WithTx(tx).Claim(ctx, arg); err != nil {
		t.Fatal(err)
	}
	return tx, id
}

// TestGroupClaimBatchBesideConcurrentClaim: a claim committed by another
// transaction after the batch's snapshot, while the batch waited for it
// (ON CONFLICT): its caller gets no row and runs the claim again, which
// returns that record; the batch's other rows are claimed.
//
// The batch's lock wait is raised from batchLockWait (200 ms) for this
// test: the test watches the batch wait, then commits, and on a loaded
// machine that took longer than 200 ms, so the batch gave up on the lock
// first and failed as a whole (retry), or had already given up when the
// test looked (TestGroupClaimBatchGivesUpOnConcurrentInsert covers what a batch
// does past its wait).
func TestGroupClaimBatchBesideConcurrentClaim(t *testing.T) {
	s, scope := groupStore(t)
	s.group.lockWait = 30 * time.Second
	ctx := context.Background()
	tx, id := claimInOpenTx(t, s, scope, "k", "other")
	var holder int32 // the open transaction's backend
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder); err != nil {
		t.Fatal(err)
	}
	id2, arg2 := claimArg(scope, "k2", "mine")
	_, arg := claimArg(scope, "k", "mine")
	got := make(chan []*batchItem[db.ClaimParams, []db.ClaimRow])
	go func() { got <- s.queueClaims([]runtime.Identity{id, id2}, []db.ClaimParams{arg, arg2}) }()
	// The batch waits on the open transaction's insert of k (blocked by
	// that transaction's backend: other tests' batches run in parallel on
	// the same server, and one of them waiting on a lock of its own is not
	// this batch).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE $1::int = ANY(pg_blocking_pids(pid)) AND query LIKE '%GroupSet%'`, holder).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch never waited for the concurrent claim")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	items := <-got
	if it := items[0]; it.err != nil || it.retry || len(it.res) != 0 {
		t.Fatalf("k: %d rows, retry %v, %v; want no row (claim again)", len(it.res), it.retry, it.err)
	}
	if it := items[1]; it.err != nil || len(it.res) != 1 || !it.res[0].Claimed {
		t.Fatalf("k2: %+v, %v; want claimed", it.res, it.err)
	}
	// Through the store, the caller's claim runs again and finds the record.
	res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "mine", Lease: time.Minute})
	if err != nil || res.Claimed || res.Record.Owner != "other" {
		t.Fatalf("claim again: claimed %v, owner %q, %v; want the other's record", res.Claimed, res.Record.Owner, err)
	}
}

// TestGroupClaimBatchGivesUpOnConcurrentInsert: a batch whose claim waits
// on another transaction's insert of its identity, and that transaction
// stays open past the batch's lock wait (a DoTx's transaction, say), fails
// as a whole: nothing of it commits, and each caller runs its own
// statement. The batch's other claims wait no longer than the lock wait.
func TestGroupClaimBatchGivesUpOnConcurrentInsert(t *testing.T) {
	s, scope := groupStore(t)
	ctx := context.Background()
	_, id := claimInOpenTx(t, s, scope, "k", "other")
	id2, arg2 := claimArg(scope, "k2", "mine")
	_, arg := claimArg(scope, "k", "mine")
	got := make(chan []*batchItem[db.ClaimParams, []db.ClaimRow], 1)
	start := time.Now()
	go func() { got <- s.queueClaims([]runtime.Identity{id, id2}, []db.ClaimParams{arg, arg2}) }()
	var items []*batchItem[db.ClaimParams, []db.ClaimRow]
	select {
	case items = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the batch still waits on the open transaction after 15 s")
	}
	waited := time.Since(start)
	for i, it := range items {
		if it.err != nil || !it.retry {
			t.Errorf("caller %d: %d rows, retry %v, %v; want the batch failed as a whole (retry)", i, len(it.res), it.retry, it.err)
		}
	}
	if waited < batchLockWait {
		t.Errorf("the batch answered after %v, before its lock wait (%v)", waited, batchLockWait)
	}
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM idem_records WHERE scope = $1", scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d records committed outside the open transaction, want 0", n)
	}
	if _, _, failed := s.GroupCommitStats(); failed != 1 {
		t.Errorf("%d batches failed, want 1", failed)
	}
}

// TestGroupTransitionBatches: each caller of a completion batch gets its
// own compare-and-set outcome: applied, refused (lease lost), or, for a
// retry of a write that was applied but whose reply was lost, the version
// that write made (its token).
func TestGroupTransitionBatches(t *testing.T) {
	s, scope := groupStore(t)
	ctx := context.Background()
	claim := func(key string) db.ClaimRow {
		_, arg := claimArg(scope, key, "w")
		rows, err := s.q.Claim(ctx, arg)
		if err != nil || len(rows) != 1 || !rows[0].Claimed {
			t.Fatalf("claiming %s: %+v, %v", key, rows, err)
		}
		return rows[0]
	}
	complete := func(r db.ClaimRow, version int64, token string) (runtime.Identity, db.TransitionParams) {
		id := runtime.Identity{Scope: r.Scope, Operation: r.Operation, Key: r.Key}
		return id, db.TransitionParams{ToState: "SUCCESS", NewOwner: "w", Ttl: interval(time.Hour), Response: []byte(`"ok"`),
			Token: token, Scope: r.Scope, Operation: r.Operation, Key: r.Key, FromState: "PROCESSING", Owner: "w", Version: version}
	}
	applied, stale, lost, twice := claim("applied"), claim("stale"), claim("lost-reply"), claim("twice")
	// The lost reply: the write was applied, its caller never heard.
	_, first := complete(lost, lost.Version, "t-lost")
	vs, err := s.q.Transition(ctx, first)
	if err != nil || len(vs) != 1 {
		t.Fatalf("the write whose reply is lost: %v, %v", vs, err)
	}
	lostVersion := vs[0]

	type caller struct {
		row     db.ClaimRow
		version int64
		token   string
		// want: applied (a new version), the version given, or none (lease lost).
		applied  bool
		version2 int64
	}
	callers := []caller{
		{row: applied, version: applied.Version, token: "t-applied", applied: true},
		{row: stale, version: stale.Version - 1000, token: "t-stale"},
		{row: lost, version: lost.Version, token: "t-lost", version2: lostVersion},
		{row: lost, version: lost.Version, token: "t-other"}, // next batch (same identity): no token match
		{row: twice, version: twice.Version, token: "t-twice-1", applied: true},
		{row: twice, version: twice.Version, token: "t-twice-2"}, // next batch: the version moved
	}
	ids := make([]runtime.Identity, len(callers))
	args := make([]db.TransitionParams, len(callers))
	for i, c := range callers {
		ids[i], args[i] = complete(c.row, c.version, c.token)
	}
	items := s.queueTransitions(ids, args)
	for i, c := range callers {
		it := items[i]
		switch {
		case it.err != nil || it.retry:
			t.Errorf("caller %d (%s, %s): retry %v, %v", i, c.row.Key, c.token, it.retry, it.err)
		case c.applied && (len(it.res) != 1 || it.res[0] <= c.version):
			t.Errorf("caller %d (%s, %s): %v, want a new version above %d", i, c.row.Key, c.token, it.res, c.version)
		case c.version2 != 0 && (len(it.res) != 1 || it.res[0] != c.version2):
			t.Errorf("caller %d (%s, %s): %v, want the lost write's version %d", i, c.row.Key, c.token, it.res, c.version2)
		case !c.applied && c.version2 == 0 && len(it.res) != 0:
			t.Errorf("caller %d (%s, %s): %v, want no row (lease lost)", i, c.row.Key, c.token, it.res)
		}
	}
	if b, _, _ := s.GroupCommitStats(); b != 2 {
		t.Errorf("%d batches, want 2 (a repeated identity waits for the next)", b)
	}
	var state string
	var token string
	if err := s.pool.QueryRow(ctx, "SELECT state, token FROM idem_records WHERE scope = $1 AND key = 'stale'", scope).Scan(&state, &token); err != nil {
		t.Fatal(err)
	}
	if state != "PROCESSING" || token != "" {
		t.Errorf("the refused write changed its record: %s, token %q", state, token)
	}
}

// TestGroupCallerGoneMidBatch: a caller whose context ends while its
// completion is queued is withdrawn (nothing of it is sent); one whose
// completion is in a batch in flight is answered with the batch's outcome,
// never with its context's error while the write then commits (a client
// told "not recorded" of a recorded SUCCESS: found by the simulation).
func TestGroupCallerGoneMidBatch(t *testing.T) {
	s, scope := groupStore(t)
	ctx := context.Background()
	var recs []db.ClaimRow
	for _, k := range []string{"in-flight", "queued"} {
		_, arg := claimArg(scope, k, "w")
		rows, err := s.q.Claim(ctx, arg)
		if err != nil || len(rows) != 1 {
			t.Fatal(rows, err)
		}
		recs = append(recs, rows[0])
	}
	g := s.group
	g.mu.Lock()
	g.busy = true // a batch is in flight: callers queue
	g.mu.Unlock()
	type answer struct {
		v   int64
		err error
	}
	call := func(r db.ClaimRow) (context.CancelFunc, chan answer) {
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan answer, 1)
		go func() {
			v, err := s.Transition(cctx, runtime.TransitionParams{ID: runtime.Identity{Scope: r.Scope, Operation: r.Operation, Key: r.Key},
				From: runtime.StateProcessing, Owner: "w", Version: r.Version, To: runtime.StateSuccess, TTL: time.Hour,
				Response: []byte(`"ok"`), Token: "t-" + r.Key})
			got <- answer{v, err}
		}()
		return cancel, got
	}
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			l := len(g.transitions)
			g.mu.Unlock()
			if l == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d callers queued, want %d", l, n)
			}
		}
	}
	cancelA, gotA := call(recs[0])
	queued(1)
	_, batch := g.next() // A's batch leaves
	cancelA()
	cancelB, gotB := call(recs[1])
	queued(1)
	cancelB()
	b := <-gotB
	if !errors.Is(b.err, context.Canceled) {
		t.Fatalf("the queued caller gone: %d, %v; want its context's error", b.v, b.err)
	}
	queued(0) // withdrawn
	select {
	case a := <-gotA:
		t.Fatalf("the caller in flight answered before its batch: %d, %v", a.v, a.err)
	case <-time.After(50 * time.Millisecond):
	}
	g.run(s, nil, batch)
	if a := <-gotA; a.err != nil || a.v <= recs[0].Version {
		t.Fatalf("the caller in flight: %d, %v; want its batch's outcome (applied)", a.v, a.err)
	}
	for i, want := range []string{"SUCCESS", "PROCESSING"} {
		var state string
		if err := s.pool.QueryRow(ctx, "SELECT state FROM idem_records WHERE scope = $1 AND key = $2", scope, recs[i].Key).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != want {
			t.Errorf("%s: %s, want %s", recs[i].Key, state, want)
		}
	}
}

// TestGroupMixedBatch: claims and completions share one statement (one
// commit); a claim of an identity completed in the same statement sees the
// record as before the completion, as if it had run first.
func TestGroupMixedBatch(t *testing.T) {
	s, scope := groupStore(t)
	ctx := context.Background()
	_, arg := claimArg(scope, "done", "w")
	rows, err := s.q.Claim(ctx, arg)
	if err != nil || len(rows) != 1 {
		t.Fatal(rows, err)
	}
	r := rows[0]
	tid := runtime.Identity{Scope: r.Scope, Operation: r.Operation, Key: r.Key}
	targ := db.TransitionParams{ToState: "SUCCESS", NewOwner: "w", Ttl: interval(time.Hour), Response: []byte(`"ok"`), Token: "t",
		Scope: r.Scope, Operation: r.Operation, Key: r.Key, FromState: "PROCESSING", Owner: "w", Version: r.Version}
	id1, c1 := claimArg(scope, "new", "a")
	id2, c2 := claimArg(scope, "done", "b")
	claims, transitions := s.sendQueued([]runtime.Identity{id1, id2}, []db.ClaimParams{c1, c2},
		[]runtime.Identity{tid}, []db.TransitionParams{targ})
	if it := claims[0]; it.err != nil || it.retry || len(it.res) != 1 || !it.res[0].Claimed {
		t.Errorf("new: %+v, retry %v, %v; want claimed", it.res, it.retry, it.err)
	}
	if it := claims[1]; it.err != nil || len(it.res) != 1 || it.res[0].Claimed || it.res[0].State != "PROCESSING" || it.res[0].Version != r.Version {
		t.Errorf("done: %+v, %v; want the record before its completion", it.res, it.err)
	}
	if it := transitions[0]; it.err != nil || len(it.res) != 1 || it.res[0] <= r.Version {
		t.Errorf("completion: %v, %v; want a new version", it.res, it.err)
	}
	if b, n, _ := s.GroupCommitStats(); b != 1 || n != 3 {
		t.Errorf("%d batches carrying %d statements, want 1 and 3", b, n)
	}
}
