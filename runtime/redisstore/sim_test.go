package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/runtime/redisstore"
	"github.com/idemkit/idem/runtime/storetest/sim"
	"github.com/idemkit/idem/runtime/storetest/sim/doors"
)

// simClients are the two deployments the simulations run on.
var simClients = []struct {
	name   string
	client func(t testing.TB) redis.UniversalClient
}{
	{"standalone", func(t testing.TB) redis.UniversalClient { return standaloneClient(t) }},
	{"cluster", func(t testing.TB) redis.UniversalClient { return clusterClient(t) }},
}

// TestSimulation runs the fault-injecting simulation on Redis, standalone
// and Cluster, in real time: the server's clock cannot be moved, so the run
// stalls the store instead of jumping its clock. Each run has a key prefix
// of its own, so AcquirePending and Sweep see only its records.
func TestSimulation(t *testing.T) {
	for _, tc := range simClients {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.client(t)
			sim.Runs(t, 1, func(t *testing.T, seed uint64) {
				const limit = 4096
				s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithMaxRecordBytes(limit))
				sim.Run(t, sim.Config{Name: "redisstore-" + tc.name, Store: s, Seed: seed, Requests: 140, RecordLimit: limit})
			})
		})
	}
}

// TestSimDoors drives every entry point but DoTx (runtime.Do, a generated
// wrapper, idemhttp, idemgrpc) on Redis, standalone and Cluster, with the
// doors' faults, all in parallel (each run has a key prefix of its own).
func TestSimDoors(t *testing.T) {
	for _, tc := range simClients {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.client(t)
			for _, door := range doors.Doors(false) {
				t.Run(door, func(t *testing.T) {
					t.Parallel()
					sim.Runs(t, 1, func(t *testing.T, seed uint64) {
						const limit = 1024
						s := newStore(t, c, redisstore.WithPrefix(testPrefix(t)), redisstore.WithMaxRecordBytes(limit))
						doors.Run(t, door, doors.Config{Name: "redisstore-" + tc.name, Store: s, Seed: seed, RecordLimit: limit})
					})
				})
			}
		})
	}
}
