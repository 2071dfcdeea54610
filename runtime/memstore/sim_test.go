package memstore_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest/sim"
)

// TestSimulation runs the fault-injecting simulation on memstore inside a
// synctest bubble: time is virtual, so leases of seconds cost nothing and the
// store's clock can jump. Runs are cheap, so CI runs five seeds.
func TestSimulation(t *testing.T) {
	sim.Runs(t, 5, func(t *testing.T, seed uint64) {
		synctest.Test(t, func(t *testing.T) {
			clock := sim.NewClock()
			sim.Run(t, sim.Config{
				Name: "memstore", Store: memstore.New(memstore.WithClock(clock.Now)), Seed: seed, Clock: clock,
				Requests: 300, Lease: 2 * time.Second, EnforceRecordLimit: true,
			})
		})
	})
}
