// Package benchcmp runs two implementations of one operation side by side in
// a benchmark, so that their ratio holds on a noisy, shared machine.
package benchcmp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Op is one operation; i is unique across the run (a sequence number).
type Op func(i int64) error

// block is how many operations a caller runs on one side before it
// switches to the other.
const block = 20

// Interleaved runs b.N operations of a and of floor, callers goroutines at
// once. Every goroutine alternates blocks of a and floor operations and
// times each block (half the goroutines start with floor), so load from
// other processes hits both alike. It reports the mean latencies
// ("a-us/op", "floor-us/op") and a/floor, the ratio of throughputs at this
// concurrency (floor latency over a's latency: 1 is as fast as the floor).
func Interleaved(b *testing.B, callers int, a, floor Op) {
	b.Helper()
	var next, seq atomic.Int64
	var ns, ops [2]atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := g % 2; ; round++ {
				side, fn := round%2, a
				if side == 1 {
					fn = floor
				}
				start := time.Now()
				n := int64(0)
				for ; n < block; n++ {
					if next.Add(1) > 2*int64(b.N) {
						break
					}
					if err := fn(seq.Add(1)); err != nil {
						once.Do(func() { firstErr = fmt.Errorf("%s: %w", [2]string{"a", "floor"}[side], err) })
						return
					}
				}
				ns[side].Add(int64(time.Since(start)))
				ops[side].Add(n)
				if n < block {
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if ops[0].Load() == 0 || ops[1].Load() == 0 {
		return
	}
	aLat := float64(ns[0].Load()) / float64(ops[0].Load())
	fLat := float64(ns[1].Load()) / float64(ops[1].Load())
	b.ReportMetric(aLat/1e3, "a-us/op")
	b.ReportMetric(fLat/1e3, "floor-us/op")
	b.ReportMetric(fLat/aLat, "a/floor")
}

// Alternating runs b.N operations of a and of floor, callers goroutines at
// once, in rounds that run one side alone and then the other (the order
// flips every round), and reports the same metrics as [Interleaved]. Use it
// where the two sides must not share the server at the same moment: a side
// that batches (group commit) changes the load the other one sees.
func Alternating(b *testing.B, callers int, a, floor Op) {
	b.Helper()
	const rounds = 4
	var seq atomic.Int64
	var ns, ops [2]int64
	per := max(int64(b.N)/rounds, 1)
	for r := range rounds {
		for k := range 2 {
			side := (r + k) % 2
			fn := a
			if side == 1 {
				fn = floor
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			var once sync.Once
			var firstErr error
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= per {
						if err := fn(seq.Add(1)); err != nil {
							once.Do(func() { firstErr = fmt.Errorf("%s: %w", [2]string{"a", "floor"}[side], err) })
							return
						}
					}
				}()
			}
			wg.Wait()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			// Wall time per operation at this concurrency: its inverse is
			// the throughput.
			ns[side] += int64(time.Since(start))
			ops[side] += per
		}
	}
	aLat := float64(ns[0]) / float64(ops[0]) * float64(callers)
	fLat := float64(ns[1]) / float64(ops[1]) * float64(callers)
	b.ReportMetric(aLat/1e3, "a-us/op")
	b.ReportMetric(fLat/1e3, "floor-us/op")
	b.ReportMetric(fLat/aLat, "a/floor")
}
