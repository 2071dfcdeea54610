package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redistest"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/redisstore"
)

// TestReshard moves the slot of a bucket holding UNKNOWN records,
// PROCESSING records whose lease expired and finished records past their
// ExpiresAt from one master to another, one key per MIGRATE, in several
// orders of the record and index keys. Between every two steps it runs the
// reconciler's and the operators' calls (AcquirePending, Sweep, List, Get)
// and clients' claims, deterministically, one after the other. During the
// migration a call may answer "not now" (a claim whose keys are split gets
// TRYAGAIN), but none may lose a record: after the migration every pending
// record is still listed and is acquired exactly once, converges, and every
// expired finished record is swept exactly once.
func TestReshard(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	// Short backoffs: a claim whose keys are split gets TRYAGAIN, which
	// go-redis retries.
	c := cl.NewClient(&redis.ClusterOptions{PoolSize: 8, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 4 * time.Millisecond})
	ctx := context.Background()
	for _, order := range []string{"indexes-first", "records-first", "interleaved"} {
		// take is how many records each step's AcquirePending and Sweep may
		// take: one spreads them over the migration, all empties the indexes
		// at the first step.
		for _, take := range []int{1, 100} {
			t.Run(fmt.Sprintf("%s/take-%d", order, take), func(t *testing.T) {
				// One bucket: every record and both indexes share one slot.
				s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithBuckets(1),
					redisstore.WithExpiryGrace(time.Hour))
				runReshard(ctx, t, cl, s, order, take)
			})
		}
	}
}

func runReshard(ctx context.Context, t *testing.T, cl *redistest.Cluster, s *redisstore.Store, order string, take int) {
	id := func(k string) runtime.Identity {
		return runtime.Identity{Scope: "reshard", Operation: "T.Reshard", Key: k}
	}
	var pending, finished []runtime.Identity
	for i := range 4 {
		u := mustClaim(t, s, claimP(id(fmt.Sprintf("unknown-%d", i)), "w", time.Minute))
		mustFinish(t, s, u, runtime.StateUnknown, 0)
		mustClaim(t, s, claimP(id(fmt.Sprintf("lapsed-%d", i)), "w", time.Millisecond))
		pending = append(pending, u.ID, id(fmt.Sprintf("lapsed-%d", i)))
	}
	for i := range 3 {
		f := mustClaim(t, s, claimP(id(fmt.Sprintf("finished-%d", i)), "w", time.Minute))
		mustFinish(t, s, f, runtime.StateSuccess, time.Millisecond)
		finished = append(finished, f.ID)
	}
	time.Sleep(20 * time.Millisecond) // the leases and the ExpiresAt pass

	_, pendKey, expKey := redisstore.KeysOf(s, pending[0])
	slot, err := cl.KeySlot(ctx, pendKey)
	if err != nil {
		t.Fatal(err)
	}
	from, err := cl.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	acquired := map[runtime.Identity]int{}
	swept := 0
	var held []runtime.Record
	// probe runs one step's calls; take is how many records AcquirePending
	// and Sweep may take (one per step, so that they spread over the
	// migration).
	probe := func(step string, take int) {
		t.Helper()
		if take > 0 {
			recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler", Lease: time.Hour, Limit: take})
			if err != nil {
				t.Errorf("%s: AcquirePending: %v", step, err)
			}
			for _, r := range recs {
				acquired[r.ID]++
				held = append(held, r)
			}
			n, err := s.Sweep(ctx, take)
			if err != nil {
				t.Errorf("%s: Sweep: %v", step, err)
			}
			swept += n
		}
		listed, err := s.List(ctx, runtime.ListParams{Limit: 1000})
		if err != nil {
			t.Errorf("%s: List: %v", step, err)
		}
		var unlisted []string
		for _, pid := range pending {
			if !slices.ContainsFunc(listed, func(r runtime.Record) bool { return r.ID == pid }) {
				unlisted = append(unlisted, pid.Key)
			}
			rec, err := s.Get(ctx, pid)
			if err != nil || (rec.State != runtime.StateUnknown && rec.State != runtime.StateProcessing) {
				t.Errorf("%s: Get(%s) = %s, %v", step, pid.Key, rec.State, err)
			}
		}
		if len(unlisted) > 0 {
			t.Errorf("%s: List does not list %q", step, unlisted)
		}
		// A client retrying an UNKNOWN call: never claimed, and a "not now"
		// (TRYAGAIN while the record's keys are split) leaves it as it was.
		res, err := s.Claim(ctx, claimP(pending[0], "client", time.Minute))
		if err != nil && !isTryAgain(err) {
			t.Errorf("%s: Claim of an UNKNOWN record: %v", step, err)
		}
		if err == nil && res.Claimed {
			t.Errorf("%s: a client claimed UNKNOWN record %s", step, pending[0].Key)
		}
	}

	probe("before", 0)
	m, err := cl.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() { // a failed subtest leaves the cluster whole for the next one
		if !closed {
			_ = m.MoveAll(ctx, 100)
			_ = m.Finish(ctx)
		}
	})
	all, err := m.Keys(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// This store's keys move one by one; other subtests' stores share the
	// slot and move at the end.
	tag := strings.TrimSuffix(pendKey, "pending")
	var records, indexes []string
	for _, k := range all {
		switch {
		case !strings.HasPrefix(k, tag):
		case strings.HasPrefix(k, tag+"r:"):
			records = append(records, k)
		default: // pending and expiry indexes, version counter
			indexes = append(indexes, k)
		}
	}
	if len(records) != len(pending)+len(finished) || !slices.Contains(indexes, expKey) {
		t.Fatalf("slot %d holds records %q and indexes %q", slot, records, indexes)
	}
	slices.Sort(records)
	slices.Sort(indexes)
	probe("migration begun", take)
	var steps []string
	switch order {
	case "indexes-first":
		steps = append(indexes, records...)
	case "records-first":
		steps = append(records, indexes...)
	case "interleaved":
		h := len(records) / 2
		steps = append(append(append(steps, records[:h]...), indexes...), records[h:]...)
	}

	for i, k := range steps {
		if err := m.Move(ctx, k); err != nil {
			t.Fatal(err)
		}
		probe(fmt.Sprintf("step %d (%s moved)", i, k[strings.Index(k, "}")+1:]), take)
	}
	if err := m.MoveAll(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	for i := range len(pending) + len(finished) {
		probe(fmt.Sprintf("after %d", i), 1)
	}

	for _, pid := range pending {
		if acquired[pid] != 1 {
			t.Errorf("%s acquired %d times, want 1", pid.Key, acquired[pid])
		}
	}
	if swept != len(finished) {
		t.Errorf("swept %d records, want %d", swept, len(finished))
	}
	for _, fid := range finished {
		if _, err := s.Get(ctx, fid); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("finished record %s not swept: %v", fid.Key, err)
		}
	}
	// The reconciler converges what it holds.
	for _, r := range held {
		mustFinish(t, s, r, runtime.StateSuccess, time.Hour)
	}
	listed, err := s.List(ctx, runtime.ListParams{Limit: 1000})
	if err != nil || len(listed) != 0 {
		t.Errorf("after convergence List = %d records, %v; want none", len(listed), err)
	}
	for _, pid := range pending {
		if rec, err := s.Get(ctx, pid); err != nil || rec.State != runtime.StateSuccess {
			t.Errorf("Get(%s) = %s, %v; want SUCCESS", pid.Key, rec.State, err)
		}
	}
	if _, err := redisstore.CheckIndexes(ctx, s); err != nil {
		t.Error(err)
	}
}

func isTryAgain(err error) bool { return err != nil && strings.Contains(err.Error(), "TRYAGAIN") }
