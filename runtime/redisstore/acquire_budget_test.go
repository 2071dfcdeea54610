package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestAcquireReachesDueRecordBehindSkipped (review r29): the acquire script
// inspects at most 2000 index entries per run, and entries it skips (UNKNOWN
// records at or above MaxAttempts, records of operations the caller did not
// ask for) stay where they are. With more than 2000 of them ahead of a due
// record in one bucket (WithBuckets(1) here; with the default 256 buckets the
// same needs about 2000 in one bucket), every run inspected the same
// skipped entries and stopped: a crashed worker's PROCESSING record behind
// them was never acquired, however often the reconciler ran. Schedule: n
// records are given up on (acquired at MaxAttempts 1, then written back
// UNKNOWN with a give-up note, as the reconciler's give-up write does), or
// left UNKNOWN under another operation; then a worker claims another key
// and dies. One reconcile pass must converge its record.
func TestAcquireReachesDueRecordBehindSkipped(t *testing.T) {
	for _, tc := range []struct {
		n       int
		otherOp bool
	}{
		{1900, false}, // under one run's budget: the control
		{2050, false},
		{4500, false}, // three runs' worth
		{2050, true},
	} {
		name := fmt.Sprintf("given-up/%d", tc.n)
		if tc.otherOp {
			name = fmt.Sprintf("other-operation/%d", tc.n)
		}
		t.Run(name, func(t *testing.T) { acquireBehindSkipped(t, tc.n, tc.otherOp) })
	}
}

func acquireBehindSkipped(t *testing.T, n int, otherOp bool) {
	ctx := context.Background()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() }) // after the keys' deletion below (cleanups run last first)
	prefix := fmt.Sprintf("idemtest-budget-%d:", time.Now().UnixNano())
	t.Cleanup(func() { deleteKeys(ctx, c, prefix) })
	st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithBuckets(1))
	if err != nil {
		t.Fatal(err)
	}
	const op = "budget.op"
	fp := runtime.Fingerprint([]byte(`"r"`))
	for i := range n {
		id := runtime.Identity{Operation: op, Key: fmt.Sprintf("skipped-%d", i)}
		if otherOp {
			id.Operation = "budget.other"
		}
		cr, err := st.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: []byte(`"r"`), Owner: "w", Lease: time.Minute})
		if err != nil || !cr.Claimed {
			t.Fatalf("claim %d: %v %+v", i, err, cr)
		}
		if _, err := st.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w", Version: cr.Record.Version,
			To: runtime.StateUnknown, Token: fmt.Sprintf("t%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for given := 0; given < n && !otherOp; {
		recs, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 500, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			t.Fatalf("only %d of %d acquired", given, n)
		}
		for _, r := range recs {
			if _, err := st.Transition(ctx, runtime.TransitionParams{ID: r.ID, From: runtime.StateUnknown, Owner: "rec", Version: r.Version,
				To: runtime.StateUnknown, Lease: time.Millisecond, Note: "reconcile gave up after 1 attempts: 503", Token: "g" + r.ID.Key}); err != nil {
				t.Fatal(err)
			}
		}
		given += len(recs)
	}
	victim := runtime.Identity{Operation: op, Key: "crashed-worker"}
	if cr, err := st.Claim(ctx, runtime.ClaimParams{ID: victim, Fingerprint: fp, Request: []byte(`"r"`), Owner: "dead", Lease: 50 * time.Millisecond}); err != nil || !cr.Claimed {
		t.Fatalf("victim claim: %v %+v", err, cr)
	}
	time.Sleep(100 * time.Millisecond) // the worker's lease ends

	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	q := func(ctx context.Context, req string) (string, runtime.Outcome, error) {
		return "done", runtime.OutcomeSucceeded, nil
	}
	if err := runtime.Register(rt, op, q, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rec.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != runtime.StateSuccess || s.Acquired != 1 {
		t.Fatalf("one reconcile pass (%+v) left the crashed worker's record %s: %d skipped records ahead of it in its bucket's index hid it", s, got.State, n)
	}
	// The skipped records are where they were: still pending, not acquired.
	if !otherOp {
		left, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: "other", Lease: time.Minute, Limit: 10, MaxAttempts: 1})
		if err != nil || len(left) != 0 {
			t.Fatalf("given-up records acquired again at MaxAttempts 1: %d, %v", len(left), err)
		}
	}
	more, err := st.AcquirePending(ctx, runtime.AcquireParams{Owner: "other", Lease: time.Minute, Limit: 10, MaxAttempts: 5})
	if err != nil || len(more) != 10 {
		t.Fatalf("a caller with a higher MaxAttempts (or every operation) found %d of the skipped records, %v; want 10", len(more), err)
	}
}

// deleteKeys deletes every key under prefix.
func deleteKeys(ctx context.Context, c *redis.Client, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 500 {
			c.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}
