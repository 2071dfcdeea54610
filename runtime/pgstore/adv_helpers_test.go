package pgstore_test

import (
	"flag"
	"testing"
	"time"
)

// Helpers of the adversarial review's tests (adv_*_test.go).

var advSeedFlag = flag.Uint64("seed", 0, "seed of the adversarial schedules (adv_*_test.go); 0: the clock's")

// advSeed returns the seed of an adversarial schedule: -seed when given
// (to replay a failure), else the clock's; it is logged either way.
func advSeed(t *testing.T) uint64 {
	t.Helper()
	seed := *advSeedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -args -seed=%d)", seed, seed)
	return seed
}
