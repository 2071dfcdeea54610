package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// cyclic is an error whose Unwrap leads back to itself: a tree that is a
// graph. next is set after construction.
type cyclic struct {
	name string
	next []error
}

func (e *cyclic) Error() string   { return e.name }
func (e *cyclic) Unwrap() []error { return e.next }

// wide returns errors.Join of n downstream errors, the last being last.
func wide(n int, last error) error {
	errs := make([]error, n)
	for i := range errs[:n-1] {
		errs[i] = fmt.Errorf("downstream %d: %w", i, errors.New("refused"))
	}
	errs[n-1] = last
	return errors.Join(errs...)
}

// deep returns last wrapped n times.
func deep(n int, last error) error {
	err := last
	for i := range n {
		err = fmt.Errorf("layer %d: %w", i, err)
	}
	return err
}

// loop returns a cycle a -> b -> a, b also wrapping leaf.
func loop(leaf error) error {
	a, b := &cyclic{name: "a"}, &cyclic{name: "b"}
	a.next = []error{b}
	b.next = []error{a, errors.New("plain")}
	if leaf != nil {
		b.next = append(b.next, leaf)
	}
	return a
}

// A timeout anywhere in the error tree, however wide or deep, is found, and a
// cyclic Unwrap ends the walk without hiding a timeout.
func TestTimeoutAnywhereInTheTree(t *testing.T) {
	rpcDeadline := grpcErr{&grpcStatus{code: 4}}
	rpcCanceled := grpcErr{&grpcStatus{code: 1}}
	tests := []struct {
		name               string
		err                error
		timeout, uncertain bool
	}{
		{"100 joined, last a gRPC DeadlineExceeded", wide(100, rpcDeadline), true, true},
		{"1,000 joined, last a gRPC DeadlineExceeded", wide(1000, rpcDeadline), true, true},
		{"1,000 joined, last a net timeout", wide(1000, timeoutErr{true}), true, true},
		{"1,000 joined, last context.DeadlineExceeded", wide(1000, context.DeadlineExceeded), true, true},
		{"1,000 joined, last a gRPC Canceled", wide(1000, rpcCanceled), false, true},
		{"1,000 joined, none", wide(1000, errors.New("refused")), false, false},
		{"1,000 deep, a gRPC DeadlineExceeded", deep(1000, rpcDeadline), true, true},
		{"1,000 joined of 1,000 deep", wide(1000, deep(1000, timeoutErr{true})), true, true},
		{"cyclic, no timeout", loop(nil), false, false},
		{"cyclic, a timeout after the cycle", loop(context.DeadlineExceeded), true, true},
		{"cyclic, a gRPC DeadlineExceeded after the cycle", loop(rpcDeadline), true, true},
		{"cyclic, context.Canceled after the cycle", loop(context.Canceled), false, true},
	}
	rt, err := runtime.New(memstore.New(), runtime.WithErrorPolicy(runtime.ReleaseRecord))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if got := runtime.IsTimeout(tt.err); got != tt.timeout {
					t.Errorf("IsTimeout = %v, want %v", got, tt.timeout)
				}
				if got := runtime.Uncertain(tt.err); got != tt.uncertain {
					t.Errorf("Uncertain = %v, want %v", got, tt.uncertain)
				}
				want := runtime.State("") // released: the policy's answer
				if tt.uncertain {
					want = runtime.StateUnknown
				}
				if got := rt.Classify(tt.err); got != want {
					t.Errorf("Classify = %q, want %q", got, want)
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("classification did not end")
			}
		})
	}
}

// Through Do with a release policy: an effect whose error is a join of 100
// downstream errors, the last a gRPC DeadlineExceeded, or a cyclic tree with
// a timeout, is UNKNOWN, and its retry does not run the effect again.
func TestWideTimeoutIsUnknownThroughDo(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithErrorPolicy(runtime.ReleaseRecord))
	if err != nil {
		t.Fatal(err)
	}
	for name, effErr := range map[string]error{
		"wide":   wide(100, grpcErr{&grpcStatus{code: 4}}),
		"cyclic": loop(context.DeadlineExceeded),
	} {
		t.Run(name, func(t *testing.T) {
			runs := 0
			call := runtime.Call[int, int]{Operation: "Fanout.Charge", Key: name, Request: 1,
				Effect: func(context.Context, int) (int, error) {
					runs++
					return 0, effErr
				}}
			for i := range 2 {
				done := make(chan error, 1)
				go func() {
					_, err := runtime.Do(context.Background(), rt, call)
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, runtime.ErrOutcomeUnknown) {
						t.Fatalf("call %d: %.200v, want ErrOutcomeUnknown", i, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Do did not return")
				}
			}
			if runs != 1 {
				t.Fatalf("the effect ran %d times, want 1", runs)
			}
		})
	}
}
