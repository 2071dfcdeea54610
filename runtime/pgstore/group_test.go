package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest"
)

// The whole conformance suite, with claims and completions batched.
func TestConformanceGroupCommit(t *testing.T) {
	p := testPool(t)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	storetest.Run(t, func(t *testing.T) runtime.Store { return s })
}

// TestGroupCommitFailedBatchCommitsNothingAndRetries: a statement that
// fails makes PostgreSQL roll its whole batch back; the others must be run
// again on their own, and each caller gets its own result.
func TestGroupCommitFailedBatchCommitsNothingAndRetries(t *testing.T) {
	p := testPool(t)
	s := pgstore.New(p, pgstore.WithGroupCommit(0))
	ctx := context.Background()
	scope := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
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
	batches, statements, failed := s.GroupCommitStats()
	t.Logf("%d batches, %d statements, %d failed batches", batches, statements, failed)
	if statements <= batches {
		t.Fatalf("%d statements in %d batches: nothing was batched", statements, batches)
	}
	if failed == 0 {
		t.Fatal("no batch failed: the invalid claim travelled alone, the schedule was not reproduced")
	}
}
