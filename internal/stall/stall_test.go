package stall

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestQuietProcessHasNoLongStall(t *testing.T) {
	w := Start()
	time.Sleep(100 * time.Millisecond)
	// A stall this long on an idle goroutine needs a starved machine; the
	// bound is loose so that the test holds under CI's own load.
	if got := w.Stop(); got > 2*time.Second {
		t.Errorf("stall of %v while the test slept", got)
	}
}

// TestStallIsSeen: in a process with one P held by a loop that cannot be
// preempted (GODEBUG=asyncpreemptoff=1, no function calls in the loop),
// the watcher runs only when the loop ends: the stall it reports is about
// the loop's length. Run in a child process, for the GODEBUG setting.
func TestStallIsSeen(t *testing.T) {
	if os.Getenv("IDEM_STALL_CHILD") == "1" {
		runtime.GOMAXPROCS(1)
		w := Start()
		time.Sleep(30 * time.Millisecond) // the watcher sleeps
		// A loop of about 400 ms with no function call in it, its length
		// from the fastest of five probes: on a loaded machine a probe
		// the kernel set aside measures long, and one such probe alone
		// made a loop of 46 ms.
		const probe = 1 << 22
		fastest := time.Duration(1<<63 - 1)
		for range 5 {
			t0 := time.Now()
			sink = count(probe)
			fastest = min(fastest, max(time.Since(t0), time.Microsecond))
		}
		n := uint64(float64(probe) * float64(400*time.Millisecond) / float64(fastest))
		t1 := time.Now()
		sink = count(n)
		fmt.Printf("stall=%d loop=%d\n", w.Stop(), time.Since(t1))
		return
	}
	// A child whose loop ran under 200 ms (its probes all slowed by
	// other processes) measured nothing this test asks about: it runs
	// again, up to three times; the bound below is the same for each.
	var ns, loop int64
	for try := 0; try < 3 && loop < int64(200*time.Millisecond); try++ {
		ns, loop = stallChild(t)
	}
	// The loop held the only P for its whole length (about 400 ms, more
	// on a loaded machine): the watcher, due every 10 ms, waited as long.
	if got := time.Duration(ns); got < time.Duration(loop)/2 || got < 100*time.Millisecond {
		t.Errorf("stall seen %v, the loop held the only P for %v", got, time.Duration(loop))
	}
}

// stallChild runs TestStallIsSeen's child and returns the stall it saw and
// its loop's length, in nanoseconds.
func stallChild(t *testing.T) (stall, loop int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStallIsSeen$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEM_STALL_CHILD=1", "GODEBUG=asyncpreemptoff=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	i := strings.Index(string(out), "stall=")
	j := strings.Index(string(out), "loop=")
	if i < 0 || j < 0 {
		t.Fatalf("child printed no stall or loop:\n%s", out)
	}
	if _, err := fmt.Sscanf(string(out[i:]), "stall=%d", &stall); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(out[j:]), "loop=%d", &loop); err != nil {
		t.Fatal(err)
	}
	return stall, loop
}

var sink uint64

// count runs n iterations of a loop with no function call: with
// asynchronous preemption off, nothing can take its P until it ends.
//
//go:noinline
func count(n uint64) uint64 {
	var x uint64
	for i := uint64(0); i < n; i++ {
		x += i ^ (x >> 3)
	}
	return x
}

func TestNoteRaisesMax(t *testing.T) {
	for _, tc := range []struct {
		name  string
		notes []time.Duration
		least time.Duration
	}{
		{"none", nil, 0},
		{"one", []time.Duration{300 * time.Millisecond}, 300 * time.Millisecond},
		{"longest wins", []time.Duration{5 * time.Second, time.Millisecond}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Start()
			for _, d := range tc.notes {
				w.Note(d)
			}
			got := w.Stop()
			if got < tc.least {
				t.Errorf("Stop = %v, want at least %v", got, tc.least)
			}
			if tc.least > 0 && got > tc.least+2*time.Second {
				t.Errorf("Stop = %v, far above the noted %v", got, tc.least)
			}
		})
	}
}
