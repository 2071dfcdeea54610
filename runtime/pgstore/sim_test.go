package pgstore_test

import (
	"testing"

	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest/sim"
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
