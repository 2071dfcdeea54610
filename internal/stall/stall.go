// Package stall measures how late the Go scheduler runs a sleeping
// goroutine, for timing tests that must tell a protocol's fault from a
// starved process: on a machine whose cores are busy with other work (CI's
// other packages, a CPU hog), a goroutine due in 10 ms may run 300 ms
// later, and a lease that expires meanwhile was lost to the machine, not
// to the code under test.
package stall

import (
	"sync"
	"time"
)

// tick is how often the watcher wakes.
const tick = 10 * time.Millisecond

// Watch measures the lateness of a goroutine that sleeps tick at a time,
// from Start to Stop.
type Watch struct {
	mu   sync.Mutex
	max  time.Duration
	stop chan struct{}
	done chan struct{}
}

// Start begins watching.
func Start() *Watch {
	w := &Watch{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Watch) run() {
	defer close(w.done)
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		due := time.Now().Add(tick)
		t.Reset(tick)
		select {
		case <-w.stop:
			// A tick that was due before Stop counts: when the process
			// ran neither this goroutine nor its caller for a while, the
			// two channels are ready at once and select may take either.
			if late := time.Since(due); late > 0 {
				w.Note(late)
			}
			return
		case <-t.C:
		}
		if late := time.Since(due); late > 0 {
			w.mu.Lock()
			w.max = max(w.max, late)
			w.mu.Unlock()
		}
	}
}

// Stop ends the watch and returns the longest lateness seen.
func (w *Watch) Stop() time.Duration {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.Max()
}

// Note records a delay measured elsewhere: a store call that answered
// late because the machine (or the server beside it) was starved. A lease
// that lapses while a renewal waits on a starved server was lost to the
// machine as surely as one whose renewal goroutine never ran, so Max and
// Stop report the longest of both.
func (w *Watch) Note(d time.Duration) {
	w.mu.Lock()
	w.max = max(w.max, d)
	w.mu.Unlock()
}

// Max is the longest lateness seen so far.
func (w *Watch) Max() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}
