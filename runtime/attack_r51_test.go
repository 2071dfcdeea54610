package runtime_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r51F32 is a value error holding a float32. Its bits are its identity
// ("its scalars bit for bit"): the one holding the quiet NaN 0x7fc00001
// timed out, the one holding the signalling NaN 0x7f800001 did not.
type r51F32 struct{ F float32 }

func (e r51F32) Error() string { return fmt.Sprintf("r51 f32 %#x", math.Float32bits(e.F)) }
func (e r51F32) Timeout() bool { return math.Float32bits(e.F) == 0x7fc00001 }

type r51C64 struct{ C complex64 }

func (e r51C64) Error() string {
	return fmt.Sprintf("r51 c64 %#x", math.Float32bits(real(e.C)))
}
func (e r51C64) Timeout() bool { return math.Float32bits(real(e.C)) == 0x7fc00001 }

var r51Bits = []uint32{0x7f800001, 0x7fc00001}

// README "The state machine": "A timeout anywhere in the error tree (... a
// net.Error ... that timed out ...) ... are UNKNOWN under every error policy
// and whatever Permanent or Retryable says: never FAILED" ... "Each error is
// told by its identity: ... a value by its type, the references it holds and
// its scalars bit for bit".
func TestR51Float32NaNBits(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		a := r51F32{math.Float32frombits(r51Bits[0])}
		b := r51F32{math.Float32frombits(r51Bits[1])}
		rt := r51AskBoth(t, a, b)
		if rt == nil {
			return
		}
		first, dup := r50Dup(t, rt, "R51.F32", "k-r51-f32", idem.Permanent(errors.Join(a, b)))
		if !errors.Is(dup, idem.ErrOutcomeUnknown) {
			t.Errorf("duplicate after a timed-out effect: %v (FailedError=%v), want ErrOutcomeUnknown; first call: %v",
				dup, errors.Is(dup, idem.ErrPermanent), first)
		}
	})
}

func TestR51Complex64NaNBits(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		r51AskBoth(t, r51C64{complex(math.Float32frombits(r51Bits[0]), 0)}, r51C64{complex(math.Float32frombits(r51Bits[1]), 0)})
	})
}

// r51AskBoth checks that a (no timeout) and b (timed out) are told apart:
// Join(a, b) is a timeout, and Permanent(Join(a, b)) UNKNOWN.
func r51AskBoth(t *testing.T, a, b error) *idem.Runtime {
	t.Helper()
	if idem.IsTimeout(a) || !idem.IsTimeout(b) {
		t.Errorf("control: IsTimeout(a)=%v IsTimeout(b)=%v", idem.IsTimeout(a), idem.IsTimeout(b))
	}
	if !idem.IsTimeout(errors.Join(a, b)) {
		t.Errorf("IsTimeout(Join(%v, %v)) = false; the second timed out", a, b)
	}
	rt, err := idem.New(memstore.New())
	if err != nil {
		t.Error(err)
		return nil
	}
	if st := rt.Classify(idem.Permanent(errors.Join(a, b))); st != idem.StateUnknown {
		t.Errorf("Classify(Permanent(Join(%v, %v))) = %q, want UNKNOWN", a, b, st)
	}
	return rt
}

// r51Asser is a caller's error type with an As method (it converts itself
// into an r51Code).
type r51Asser struct{ code string }

func (e *r51Asser) Error() string { return "asser " + e.code }
func (e *r51Asser) As(target any) bool {
	if p, ok := target.(*r51Code); ok {
		*p = r51Code(e.code)
		return true
	}
	return false
}

type r51Code string

type r51AsIface interface {
	error
	As(any) bool
}

// Observation O1 of review r51, documented since (README "The state
// machine": a tree larger than 65,536 errors "is flattened to its first
// 65,536 errors: errors.Is and errors.As on the call's error find only
// those"): the call is UNKNOWN, its message is kept, and the errors past the
// bound are not found. (The effect's own error is the caller's to read.)
func TestR51FlattenAsInterfaceTarget(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		shared := errors.New("shared")
		user := &r51Asser{code: "X1"}
		orig := idem.Permanent(errors.Join(shared, shared, user))
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		first, _ := r50Dup(t, rt, "R51.FlatAs", "k-r51-flatas", orig)
		if first.Error() != orig.Error() {
			t.Errorf("message changed: %q vs %q", first, orig)
		}
		var wantA, gotA r51AsIface
		okW := errors.As(orig, &wantA)
		okG := errors.As(first, &gotA)
		if !errors.Is(first, shared) || !errors.As(first, new(*r51Asser)) {
			t.Errorf("control: Is/As of the concrete errors lost")
		}
		// The documented exception (README): a target interface whose
		// methods are among Error, Is and As finds the flattened error
		// itself, which has the original's message.
		if !okW || !okG || gotA.Error() != orig.Error() {
			t.Errorf("errors.As(_, *interface{error; As(any) bool}): original finds %T %v (%v); Do's error finds %T %v (%v)",
				wantA, wantA, okW, gotA, gotA, okG)
		}
		var wantM, gotM interface{ Unwrap() []error }
		okW = errors.As(orig, &wantM)
		okG = errors.As(first, &gotM)
		if okW != okG || fmt.Sprintf("%T %p", wantM, wantM) != fmt.Sprintf("%T %p", gotM, gotM) {
			nw, ng := 0, 0
			if okW {
				nw = len(wantM.Unwrap())
			}
			if okG {
				ng = len(gotM.Unwrap())
			}
			t.Errorf("errors.As(_, *interface{Unwrap() []error}): original finds %T with %d children (%v); Do's error finds %T with %d children (%v)",
				wantM, nw, okW, gotM, ng, okG)
		}
	})
}

var errR51Far = errors.New("r51 far sentinel")

type r51FarErr struct{ n int }

func (e *r51FarErr) Error() string { return fmt.Sprintf("r51 far %d", e.n) }

// r51Big is Permanent(Join(70,000 distinct leaves, then errR51Far and an
// *r51FarErr)): a tree that is neither cyclic nor shares a subtree
// (optionally shared: leaf 0 twice), larger than the walk's bound.
func r51Big(shared bool) error {
	leaves := make([]error, 0, 70003)
	for i := 0; i < 70000; i++ {
		leaves = append(leaves, fmt.Errorf("leaf %d", i))
	}
	if shared {
		leaves = append(leaves, leaves[0])
	}
	leaves = append(leaves, errR51Far, &r51FarErr{7})
	return errors.Join(leaves...)
}

// Observation O1 of review r51, documented since (README "The state
// machine": a tree larger than 65,536 errors "is flattened to its first
// 65,536 errors: errors.Is and errors.As on the call's error find only
// those"): the call is UNKNOWN, its message is kept, and the errors past the
// bound are not found. (The effect's own error is the caller's to read.)
func TestR51LargeTreeFlattenedToBound(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			testenv.Within(t, 60*time.Second, func() {
				rt, err := idem.New(memstore.New())
				if err != nil {
					t.Error(err)
					return
				}
				orig := r51Big(shared)
				if !errors.Is(orig, errR51Far) {
					t.Errorf("control: errors.Is(orig) = false")
				}
				var fw *r51FarErr
				if !errors.As(orig, &fw) {
					t.Errorf("control: errors.As(orig) = false")
				}
				first, dup := r50Dup(t, rt, "R51.Big", fmt.Sprintf("k-r51-big-%v", shared), orig)
				t.Logf("first %T is original: %v: %.150q; duplicate: %.80v", first, first == orig, first, dup)
				if first == nil || !strings.HasSuffix(first.Error(), orig.Error()) {
					t.Errorf("message changed")
				}
				if !errors.Is(first, idem.ErrOutcomeUnknown) {
					t.Errorf("control: not ErrOutcomeUnknown")
				}
				if !errors.As(first, new(interface{ Error() string })) {
					t.Errorf("errors.As found no error in Do's error")
				}
				var fg *r51FarErr
				if errors.Is(first, errR51Far) || errors.As(first, &fg) {
					t.Errorf("errors.Is or errors.As on Do's error found an error past the bound: the README says they do not")
				}
			})
		})
	}
}

// r51Cap holds a slice; two of them share backing array, pointer and
// length, and differ by capacity only.
type r51Cap struct{ S []byte }

func (e r51Cap) Error() string { return fmt.Sprintf("r51 cap %d", cap(e.S)) }
func (e r51Cap) Timeout() bool { return cap(e.S) == 1 }

// Observation (capacity is arguably not a "reference" or "scalar" the
// README names): two slices with one pointer and length are one error.
func TestR51SliceCapOnly(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		arr := make([]byte, 4)
		a, b := r51Cap{arr[0:1:4]}, r51Cap{arr[0:1:1]}
		if idem.IsTimeout(a) || !idem.IsTimeout(b) {
			t.Errorf("control")
		}
		if !idem.IsTimeout(errors.Join(a, b)) {
			t.Errorf("IsTimeout(Join(cap 4, cap 1)) = false; the second timed out")
		}
	})
}

// r51F32Cycle is a value error holding a float32 NaN whose Unwrap returns
// itself: keyed by its bits (read from memory), the walk ends at once and
// reads the tree whole, so a Permanent mark on it is FAILED (not the
// uncertainty of a walk stopped at its bound).
type r51F32Cycle struct{ F float32 }

func (e r51F32Cycle) Error() string { return "r51 f32 cycle" }
func (e r51F32Cycle) Unwrap() error { return e }

func TestR51Float32NaNCycleReadWhole(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		e := r51F32Cycle{math.Float32frombits(r51Bits[0])}
		if st := rt.Classify(idem.Permanent(e)); st != idem.StateFailed {
			t.Errorf("Classify(Permanent(a float32 NaN cycle)) = %q, want FAILED (the tree is one error, read whole)", st)
		}
	})
}

// r51F32Any holds a float32 in an interface field: there its bits reach
// the walk through a float64, which keeps all but a NaN's signalling bit,
// so such a value is not keyed (read each time met) and both are asked.
type r51F32Any struct{ X any }

func (e r51F32Any) Error() string { return fmt.Sprintf("r51 any %v", e.X) }
func (e r51F32Any) Timeout() bool { return math.Float32bits(e.X.(float32)) == 0x7fc00001 }

func TestR51Float32NaNInInterface(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		r51AskBoth(t, r51F32Any{math.Float32frombits(r51Bits[0])}, r51F32Any{math.Float32frombits(r51Bits[1])})
	})
}

// r51FarMark is Join(n leaves, Permanent(x)) [+ leaf 0 again when shared]:
// 1 + n + 2 distinct errors, the mark at the far end.
func r51FarMark(n int, shared bool) error {
	leaves := make([]error, 0, n+2)
	for i := 0; i < n; i++ {
		leaves = append(leaves, fmt.Errorf("leaf %d", i))
	}
	if shared {
		leaves = append(leaves, leaves[0])
	}
	leaves = append(leaves, idem.Permanent(errors.New("x")))
	return errors.Join(leaves...)
}

// README: "A walk reads at most 65,536 errors ...: a tree larger than that
// is uncertain"; "the first Permanent or Retryable mark in the tree decides".
func TestR51FarMarkBound(t *testing.T) {
	for _, tc := range []struct {
		total  int
		shared bool
		want   idem.State
	}{{65536, false, idem.StateFailed}, {65536, true, idem.StateFailed}, {65537, false, idem.StateUnknown}, {65537, true, idem.StateUnknown}} {
		t.Run(fmt.Sprintf("%d-shared=%v", tc.total, tc.shared), func(t *testing.T) {
			testenv.Within(t, 60*time.Second, func() {
				rt, err := idem.New(memstore.New())
				if err != nil {
					t.Error(err)
					return
				}
				e := r51FarMark(tc.total-3, tc.shared)
				if st := rt.Classify(e); st != tc.want {
					t.Errorf("Classify = %q, want %q", st, tc.want)
				}
				_, dup := r50Dup(t, rt, "R51.FarMark", fmt.Sprintf("k-r51-far-%d-%v", tc.total, tc.shared), e)
				got := idem.State("?")
				switch {
				case errors.Is(dup, idem.ErrOutcomeUnknown):
					got = idem.StateUnknown
				case errors.Is(dup, idem.ErrPermanent):
					got = idem.StateFailed
				}
				if got != tc.want {
					t.Errorf("recorded %q (duplicate %.100v), want %q", got, dup, tc.want)
				}
			})
		})
	}
}
