package memstore_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest/sim"
	"github.com/idemkit/idem/runtime/storetest/sim/doors"
)

// TestSimulation runs the fault-injecting simulation on memstore inside a
// synctest bubble: time is virtual, so leases of seconds cost nothing and the
// store's clock can jump. Runs are cheap, so CI runs the regression seeds
// and five fresh ones.
func TestSimulation(t *testing.T) {
	run := func(t *testing.T, seed uint64) {
		synctest.Test(t, func(t *testing.T) {
			clock := sim.NewClock()
			sim.Run(t, sim.Config{
				Name: "memstore", Store: memstore.New(memstore.WithClock(clock.Now)), Seed: seed, Clock: clock,
				Requests: 300, Lease: 2 * time.Second, EnforceRecordLimit: true,
			})
		})
	}
	sim.Regressions(t, run)
	sim.Runs(t, 5, run)
}

// TestSimDoors drives every entry point (runtime.Do, a generated wrapper,
// idemhttp behind an http.Server, idemgrpc over a grpc server) on memstore,
// with the doors' faults: slow, failing and timing-out renewals, a record
// limit that refuses every outcome kind, handler errors wrapped every way,
// caller deadlines during waits. It runs in real time (the network doors
// cannot run in a synctest bubble), the doors in parallel.
func TestSimDoors(t *testing.T) {
	for _, door := range doors.Doors(false) {
		t.Run(door, func(t *testing.T) {
			t.Parallel()
			sim.Runs(t, 1, func(t *testing.T, seed uint64) {
				doors.Run(t, door, doors.Config{Name: "memstore", Store: memstore.New(), Seed: seed, EnforceRecordLimit: true})
			})
		})
	}
}
