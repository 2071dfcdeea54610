// Package storetest is the conformance suite every [runtime.Store] must
// pass. A store's tests call [Run] with a constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) runtime.Store { return memstore.New() })
//	}
//
// The suite checks the store's primitives (atomic claim, takeover by CAS,
// stale owners rejected, TTL and sweeping, reconciler acquisition) and the
// runtime's behaviour on top of it (64 concurrent duplicates run the effect
// once, replays, key reuse, in-flight waits, timeouts to UNKNOWN, scope
// isolation). It runs in real time with short leases, so stores that decide
// time with their own clock (PostgreSQL, Redis) are tested as they run.
//
// Tests isolate themselves with a unique scope per test, so the same
// database can back every test. AcquirePending and Sweep work store-wide:
// tests of acquisition keep to an operation of their own (the Operations
// filter), and tests of sweeping check only their own records.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// NewStore returns the store under test. It may return the same store for
// every call (records are isolated by scope).
type NewStore func(t *testing.T) runtime.Store

// Run runs the whole suite.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Store", func(t *testing.T) { RunStore(t, newStore) })
	t.Run("Runtime", func(t *testing.T) { RunRuntime(t, newStore) })
	t.Run("Reconcile", func(t *testing.T) { RunReconcile(t, newStore) })
	t.Run("Faults", func(t *testing.T) { RunFaults(t, newStore) })
}

// Timing of the suite: leases short enough to expire during a test, long
// enough that a loaded CI machine does not expire them by accident.
const (
	shortLease = 150 * time.Millisecond
	longLease  = 30 * time.Second
	shortTTL   = 300 * time.Millisecond
)

// uniqueScope returns a scope no other test uses.
func uniqueScope(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := t.Name()
	if len(name) > 180 {
		name = name[len(name)-180:]
	}
	return name + "/" + hex.EncodeToString(b[:])
}

func sleep(d time.Duration) { time.Sleep(d) }

// testCase is one named case of the suite.
type testCase struct {
	name string
	fn   func(t *testing.T, s runtime.Store)
}

// runCases runs cases in parallel, each on a store from newStore.
func runCases(t *testing.T, newStore NewStore, cases []testCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}
