package errtree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"
)

// ratio is a value error whose Unwrap returns its receiver: a cycle of
// values, equal to itself unless it holds a NaN.
type ratio struct{ r float64 }

func (e ratio) Error() string { return fmt.Sprint("ratio ", e.r) }
func (e ratio) Unwrap() error { return e }

// probe is an error that is not comparable (it holds a func) and asks its
// func whether it timed out.
type probe struct {
	op       string
	timedOut func() bool
}

func (e probe) Error() string { return "probe " + e.op }
func (e probe) Timeout() bool { return e.timedOut() }

// fresh makes a new error on every Unwrap: a chain that never ends.
type fresh struct{ n int }

func (e *fresh) Error() string { return "fresh" }
func (e *fresh) Unwrap() error { return &fresh{e.n + 1} }

// fan is a multi-error with a short message (its Error does not walk).
type fan struct{ kids []error }

func (e *fan) Error() string   { return "fan-out" }
func (e *fan) Unwrap() []error { return e.kids }

// veil holds an error it shows only to WalkVeiled, and answers Is for it
// but io.ErrUnexpectedEOF, as the runtime's unmarked error does for its
// permanent-failure sentinel.
type veil struct{ err error }

func (e *veil) Error() string   { return "veil: " + e.err.Error() }
func (e *veil) Veiled() error   { return e.err }
func (e *veil) Is(t error) bool { return t != io.ErrUnexpectedEOF && IsVeiled(e.err, t) }

// sharedDAG returns depth levels of a fan whose two children share one
// child: depth*2+1 errors, 2^depth paths.
func sharedDAG(depth int, leaf error) error {
	e := leaf
	for range depth {
		e = &fan{kids: []error{fmt.Errorf("a: %w", e), fmt.Errorf("b: %w", e)}}
	}
	return e
}

// nestedVeils returns depth levels that each join two veils of the level
// below (one shared error under both): what nested calls' unmarked errors,
// joined by each outer effect, make.
func nestedVeils(depth int, leaf error) error {
	e := leaf
	for range depth {
		e = errors.Join(&veil{e}, &veil{e})
	}
	return e
}

// within fails t if f does not return within d.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
	}
}

func isTimeout(e error) bool {
	t, ok := e.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// TestShapes: every walk ends and asks every distinct error, for the trees
// that broke it (review r49): a cyclic value holding a NaN, two errors
// that differ only by their closures, a chain that never ends, a subtree
// shared 64 levels deep, and nested veils sharing what they hold.
func TestShapes(t *testing.T) {
	closure := func(status int) func() bool { return func() bool { return status == 504 } }
	for _, tc := range []struct {
		name    string
		err     error
		match   func(error) bool
		found   bool
		veiled  bool // through veils (WalkVeiled), else Walk
		partial bool // WalkVeiled reads it only up to MaxVisits
	}{
		{"cyclic value holding NaN", ratio{math.NaN()}, func(e error) bool { return IsNode(e, io.EOF) }, false, false, false},
		{"cyclic value holding NaN, veiled walk", ratio{math.NaN()}, isTimeout, false, true, false},
		{"two probes differing by their closures", errors.Join(probe{"charge", closure(400)}, probe{"charge", closure(504)}), isTimeout, true, false, false},
		{"the 504 probe first", errors.Join(probe{"charge", closure(504)}, probe{"charge", closure(400)}), isTimeout, true, true, false},
		{"chain that never ends", &fresh{}, isTimeout, false, true, true},
		{"shared 64 levels deep, the leaf", sharedDAG(64, context.DeadlineExceeded), func(e error) bool { return IsNode(e, context.DeadlineExceeded) }, true, false, false},
		{"shared 64 levels deep, not there", sharedDAG(64, io.EOF), isTimeout, false, true, false},
		{"nested veils 64 levels deep", nestedVeils(64, context.DeadlineExceeded), func(e error) bool { return IsNode(e, context.DeadlineExceeded) }, true, true, false},
		{"nested veils, not there", nestedVeils(64, io.EOF), isTimeout, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			within(t, 10*time.Second, func() {
				if tc.veiled {
					found, complete := WalkVeiled(tc.err, tc.match)
					if found != tc.found || complete == tc.partial {
						t.Errorf("WalkVeiled = %v, complete %v; want %v, complete %v", found, complete, tc.found, !tc.partial)
					}
					return
				}
				if got := Walk(tc.err, tc.match); got != tc.found {
					t.Errorf("Walk = %v, want %v", got, tc.found)
				}
			})
		})
	}
}

// TestVeilIsLinear: a veil's Is over nested veils reads each error once,
// not once per path (each veil's Is with a visited set of its own was
// 2^depth).
func TestVeilIsLinear(t *testing.T) {
	within(t, 10*time.Second, func() {
		err := nestedVeils(64, io.EOF)
		if !errors.Is(&veil{err}, io.EOF) || errors.Is(&veil{err}, io.ErrUnexpectedEOF) || errors.Is(&veil{err}, io.ErrClosedPipe) {
			t.Error("the veil's Is does not answer for what it holds")
		}
	})
}

// TestAcyclicShared: a shared subtree is flattened, so that the standard
// library's walks, which read a subtree once per path, end at once and
// find what the tree holds, first match first.
func TestAcyclicShared(t *testing.T) {
	within(t, 10*time.Second, func() {
		first := probe{"first", func() bool { return true }}
		err := sharedDAG(64, errors.Join(first, context.DeadlineExceeded))
		out := Acyclic(err)
		if out.Error() != "fan-out" {
			t.Errorf("message %q", out.Error())
		}
		if !errors.Is(out, context.DeadlineExceeded) || errors.Is(out, io.EOF) {
			t.Error("errors.Is of the flattened error")
		}
		var p probe
		if !errors.As(out, &p) || p.op != "first" {
			t.Errorf("errors.As found %v", p)
		}
	})
}

// TestAcyclicTooLarge: a chain that never ends is flattened to its first
// MaxVisits errors, which the standard library's walks then read.
func TestAcyclicTooLarge(t *testing.T) {
	within(t, 10*time.Second, func() {
		out := Acyclic(&fresh{})
		f, ok := out.(*flat)
		if !ok || len(f.nodes) != MaxVisits {
			t.Fatalf("Acyclic = %T with %d nodes", out, len(f.nodes))
		}
		if errors.Is(out, io.EOF) {
			t.Error("errors.Is found io.EOF")
		}
	})
}

// boom is an error whose Is, As and Unwrap panic.
type boom struct{}

func (e *boom) Error() string   { return "boom" }
func (e *boom) Is(error) bool   { panic("Is") }
func (e *boom) As(any) bool     { panic("As") }
func (e *boom) Unwrap() []error { panic("Unwrap") }

// TestSafe: SafeIs and SafeAs read past an error whose methods panic.
func TestSafe(t *testing.T) {
	err := fmt.Errorf("outer: %w", errors.Join(&boom{}, context.Canceled, ratio{1}))
	if !SafeIs(err, context.Canceled) || SafeIs(err, io.EOF) {
		t.Error("SafeIs")
	}
	var r ratio
	if ok := SafeAs(err, &r); !ok || r.r != 1 {
		t.Errorf("SafeAs = %v, %v", r, ok)
	}
	f := &fan{}
	if SafeAs(err, &f) || f == nil {
		t.Error("SafeAs found a *fan, or cleared the target")
	}
}

// TestMaxVisitsDocumented: README and runtime.IsTimeout's doc give the
// bound in figures.
func TestMaxVisitsDocumented(t *testing.T) {
	if MaxVisits != 65_536 {
		t.Fatalf("MaxVisits is %d; README and runtime.IsTimeout say 65,536", MaxVisits)
	}
}
