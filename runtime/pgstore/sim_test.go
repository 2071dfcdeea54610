package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest/sim"
	"github.com/idemkit/idem/runtime/storetest/sim/doors"
)

// TestSimulation runs the fault-injecting simulation on PostgreSQL, in real
// time: the server's clock cannot be moved, so the run stalls the store
// instead of jumping its clock.
func TestSimulation(t *testing.T) {
	p := testPool(t)
	sim.Runs(t, 1, func(t *testing.T, seed uint64) {
		const limit = 4096
		sim.Run(t, sim.Config{
			Name: "pgstore", Store: pgstore.New(p, pgstore.WithMaxRecordBytes(limit)), Seed: seed,
			Requests: 140, RecordLimit: limit,
		})
	})
}

// TestSimDoors drives every entry point on PostgreSQL (runtime.Do, a
// generated wrapper, idemhttp, idemgrpc, DoTx in concurrent caller
// transactions) with the doors' faults, and then runtime.Do and the
// generated wrapper and DoTx again in group-commit mode with failing
// batches (TestSimDoors/groupcommit-<door>: DoTx's own statements run in
// its caller's transaction, beside the batches of the pool's): run it
// under -race. The doors run in
// parallel, except the two runs of the generated wrapper.
func TestSimDoors(t *testing.T) {
	p := testPool(t)
	const limit = 1024
	for _, door := range doors.Doors(true) {
		t.Run(door, func(t *testing.T) {
			t.Parallel()
			sim.Runs(t, 1, func(t *testing.T, seed uint64) {
				doors.Run(t, door, doors.Config{Name: "pgstore", Store: pgstore.New(p, pgstore.WithMaxRecordBytes(limit)),
					Seed: seed, RecordLimit: limit, Pool: p})
			})
		})
	}
	for _, door := range []string{doors.DoorDo, doors.DoorGenerated, doors.DoorTx} {
		t.Run("groupcommit-"+door, func(t *testing.T) {
			// Not in parallel with the other generated-wrapper run (see
			// doors.Doors): it runs first, the parallel ones after.
			if door != doors.DoorGenerated {
				t.Parallel()
			}
			sim.Runs(t, 1, func(t *testing.T, seed uint64) {
				s := pgstore.New(p, pgstore.WithMaxRecordBytes(limit), pgstore.WithGroupCommit(0))
				doors.Run(t, door, doors.Config{Name: "pgstore-group", Store: s, Seed: seed, RecordLimit: limit,
					Pool: p, Background: poisonBatches(s)})
				batches, statements, failed := s.GroupCommitStats()
				t.Logf("group commit: %d batches, %d statements, %d failed batches", batches, statements, failed)
				if failed == 0 {
					t.Errorf("no batch failed: the poisoned claims travelled alone (%d batches)", batches)
				}
			})
		})
	}
}

// poisonBatches sends, every few milliseconds, a burst of claims and a
// completion, one claim and the completion of which PostgreSQL refuses (a
// scope that is not UTF-8): the batches they travel in fail as a whole and
// their statements are run again one by one.
func poisonBatches(s *pgstore.Store) func(ctx context.Context) {
	return func(ctx context.Context) {
		for i := 0; ; i++ {
			var wg sync.WaitGroup
			for j := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := runtime.Identity{Scope: fmt.Sprintf("doors-poison/%d", i), Operation: "Doors.Poison", Key: fmt.Sprint("k", j)}
					switch j {
					case 0:
						id.Scope += "\xff"
					case 1: // a completion PostgreSQL refuses: transition batches fail too
						id.Scope += "\xff"
						_, _ = s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "poison", Version: 1,
							To: runtime.StateSuccess, TTL: time.Minute, Response: []byte(`{}`)})
						return
					}
					_, _ = s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "poison", Lease: time.Second})
				}()
			}
			wg.Wait()
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
