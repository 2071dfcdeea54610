package errtree

import (
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// self unwraps to next, which may lead back to it.
type self struct {
	msg  string
	next error
}

func (e *self) Error() string { return e.msg }
func (e *self) Unwrap() error { return e.next }

// multi unwraps to several.
type multi struct{ kids []error }

func (e *multi) Error() string   { return "multi" }
func (e *multi) Unwrap() []error { return e.kids }

// coded is an error value with a code.
type coded struct{ code string }

func (e coded) Error() string { return "coded " + e.code }

func TestAcyclic(t *testing.T) {
	loop := &self{msg: "loop"}
	loop.next = loop
	a, b := &self{msg: "a"}, &self{msg: "b"}
	a.next, b.next = fmt.Errorf("via: %w", b), a
	join := &multi{}
	join.kids = []error{io.EOF, join, coded{"c1"}}
	shared := &self{msg: "shared", next: os.ErrNotExist}
	dag := &multi{kids: []error{shared, fmt.Errorf("again: %w", shared)}}
	for _, tc := range []struct {
		name    string
		err     error
		cyclic  bool
		flat    bool    // Acyclic flattens it (a cycle, or a shared subtree)
		is      []error // errors.Is holds for each
		isNot   []error
		code    string // what errors.As finds for a *string, if anything
		message string
	}{
		{"nil", nil, false, false, nil, nil, "", ""},
		{"plain", io.EOF, false, false, []error{io.EOF}, []error{os.ErrNotExist}, "", "EOF"},
		{"self cycle", loop, true, true, []error{loop}, []error{io.EOF}, "", "loop"},
		{"two-error cycle", a, true, true, []error{a, b}, []error{io.EOF}, "", "a"},
		{"join cycle", join, true, true, []error{io.EOF, join}, []error{os.ErrNotExist}, "c1", "multi"},
		{"dag, no cycle", dag, false, true, []error{os.ErrNotExist, shared}, []error{io.EOF}, "", "multi"},
		{"wrapped cycle", fmt.Errorf("outer: %w", loop), true, true, []error{loop}, []error{io.EOF}, "", "outer: loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cyclic(tc.err); got != tc.cyclic {
				t.Fatalf("Cyclic = %v, want %v", got, tc.cyclic)
			}
			out := Acyclic(tc.err)
			if !tc.flat && out != tc.err {
				t.Fatalf("Acyclic of a tree is another error: %#v", out)
			}
			if tc.flat && tc.err != nil {
				if _, ok := out.(*flat); !ok {
					t.Fatalf("Acyclic of a cyclic or shared tree is not flat: %#v", out)
				}
			}
			if tc.err == nil {
				return
			}
			if Cyclic(out) {
				t.Fatal("Acyclic's answer is cyclic")
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if out.Error() != tc.message {
					t.Errorf("message %q, want %q", out.Error(), tc.message)
				}
				for _, target := range tc.is {
					if !errors.Is(out, target) || !Is(out, target) || !Is(tc.err, target) {
						t.Errorf("errors.Is(%v) is false", target)
					}
				}
				for _, target := range tc.isNot {
					if errors.Is(out, target) || Is(out, target) || Is(tc.err, target) {
						t.Errorf("errors.Is(%v) is true", target)
					}
				}
				var c coded
				if errors.As(out, &c) != (tc.code != "") || c.code != tc.code {
					t.Errorf("errors.As found %v, want code %q", c, tc.code)
				}
				if c, ok := As[coded](tc.err); ok != (tc.code != "") || c.code != tc.code {
					t.Errorf("As[coded] = %v %v, want %q", c, ok, tc.code)
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a walk of Acyclic's answer did not end")
			}
		})
	}
}

// TestWalkOrder: the flattened error lists the errors in the order
// errors.Is meets them, so that "the first mark in the tree" is the same
// error before and after.
func TestWalkOrder(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	loop := &self{msg: "loop"}
	loop.next = &multi{kids: []error{first, loop, second}}
	var order []error
	Walk(Acyclic(loop), func(e error) bool {
		order = append(order, e)
		return false
	})
	// The flattened error itself, then loop, its multi, first, second.
	if len(order) != 5 || order[1] != loop || order[3] != first || order[4] != second {
		t.Fatalf("walk order of the flattened error: %v", order)
	}
}

// panicky is an error whose Unwrap panics with v.
type panicky struct{ v any }

func (e panicky) Error() string { return "panicky" }
func (e panicky) Unwrap() error { panic(e.v) }

// TestAcyclicUnwrapPanics: an error whose Unwrap panics is returned as it
// is, whatever the panic's value, nil under GODEBUG=panicnil=1 included
// (recover then returns nil, and a recover that looked at its value took
// the panic for a return and answered no error at all).
func TestAcyclicUnwrapPanics(t *testing.T) {
	t.Setenv("GODEBUG", "panicnil=1")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"value", panicky{"boom"}},
		{"nil", panicky{nil}},
		{"wrapped nil", fmt.Errorf("outer: %w", panicky{nil})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := Acyclic(tc.err); out != tc.err {
				t.Fatalf("Acyclic = %#v, want the error itself", out)
			}
		})
	}
}
