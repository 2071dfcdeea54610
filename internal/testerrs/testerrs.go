// Package testerrs holds error shapes that tests of the error-tree walks
// share: a fan-out whose levels share their children (few errors, very
// many paths), an error whose Is method panics, and the frames of a
// panicking stack that name this module's code.
package testerrs

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Fan is a multi-error with a short message (its Error does not walk its
// children, so a tree of them prints fast whatever its paths).
type Fan struct{ Kids []error }

func (e *Fan) Error() string   { return fmt.Sprintf("%d sub-requests failed", len(e.Kids)) }
func (e *Fan) Unwrap() []error { return e.Kids }

// SharedDAG returns depth levels of a Fan whose two children are the level
// below: depth+1 distinct errors, 2^depth paths from the top to leaf.
func SharedDAG(depth int, leaf error) error {
	e := leaf
	for range depth {
		e = &Fan{Kids: []error{e, e}}
	}
	return e
}

// NilIs is an error whose Is method dereferences a nil pointer, as a
// typed-nil error of a client library does.
type NilIs struct{ resp *struct{ code int } }

func (e *NilIs) Error() string        { return "ledger lookup failed" }
func (e *NilIs) Is(target error) bool { return e.resp.code == 404 }

// Frames returns, from the stack of the goroutine that calls it (a
// recover's), the places of the errors package's frames and of this
// module's non-test code: where a panic went through.
func Frames() string {
	var out []string
	lines := strings.Split(string(debug.Stack()), "\n")
	for i, l := range lines {
		if i+1 < len(lines) && !strings.HasPrefix(l, "\t") &&
			(strings.HasPrefix(l, "errors.") || strings.Contains(l, "idemkit/idem/") && !strings.Contains(l, "_test")) {
			out = append(out, strings.TrimSpace(lines[i+1]))
		}
	}
	return strings.Join(out, "\n")
}
