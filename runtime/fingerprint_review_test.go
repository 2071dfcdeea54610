// Regression tests from the fresh review of the whole-request fingerprint:
// each failed before its fix (invalid UTF-8 json replaces, two embedded
// marshalers whose fields json promotes and drops, what omitempty and
// omitzero leave out for values that differ, map keys json takes as
// strings, a cycle through a map).

package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// doTwice runs Do with a then b under one key; it reports whether b was
// replayed (effect ran once, no error) and the second error.
func doTwice[T any](t *testing.T, a, b T) (replayed bool, err2 error) {
	t.Helper()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runs := 0
	eff := func(ctx context.Context, r T) (int, error) { runs++; return runs, nil }
	c := runtime.Call[T, int]{Operation: "Op", Key: "k1", Request: a, Effect: eff}
	if _, err := runtime.Do(ctx, rt, c); err != nil {
		t.Fatalf("first Do: %v", err)
	}
	c.Request = b
	_, err2 = runtime.Do(ctx, rt, c)
	return err2 == nil && runs == 1, err2
}

func fp(t *testing.T, v any) []byte {
	t.Helper()
	rt, _ := runtime.New(memstore.New())
	b, err := rt.FingerprintOf(v)
	if err != nil {
		t.Fatalf("FingerprintOf: %v", err)
	}
	return b
}

// expectDifferent: a and b are different requests.
func expectDifferent[T any](t *testing.T, a, b T) {
	t.Helper()
	same := bytes.Equal(fp(t, a), fp(t, b))
	replayed, err := doTwice(t, a, b)
	t.Logf("FingerprintOf equal=%v; Do second: replayed=%v err=%v", same, replayed, err)
	if same || replayed || !errors.Is(err, runtime.ErrKeyReused) {
		t.Errorf("different requests compared the same")
	}
}

func expectSame[T any](t *testing.T, a, b T) {
	t.Helper()
	same := bytes.Equal(fp(t, a), fp(t, b))
	replayed, err := doTwice(t, a, b)
	t.Logf("FingerprintOf equal=%v; Do second: replayed=%v err=%v", same, replayed, err)
	if !same || !replayed {
		t.Errorf("the same request compared different")
	}
}

// A1: invalid UTF-8 in strings is replaced by U+FFFD by encoding/json.
type utfReq struct{ Payload string }

func TestFingerprintReviewInvalidUTF8(t *testing.T) {
	expectDifferent(t, utfReq{"\xff"}, utfReq{"\xfe"})
}

func TestFingerprintReviewInvalidUTF8MapKey(t *testing.T) {
	expectDifferent(t, map[string]int{"a\xff": 1}, map[string]int{"a\xfe": 1})
}

// A2: a tag name json rejects (isValidTag) falls back to the Go name.
type badTag struct {
	A int `json:"B"`
	//lint:ignore SA5008 the tag json rejects is the case under test
	B int `json:"x'y"`
}

func TestFingerprintReviewInvalidTagCollision(t *testing.T) {
	expectDifferent(t, badTag{1, 1}, badTag{1, 2})
}

// A3: two embedded marshalers at one depth: the method is ambiguous,
// json promotes their fields instead.
type Start struct{ T time.Time }

func (s Start) MarshalJSON() ([]byte, error) { return s.T.MarshalJSON() }

type End struct{ T time.Time }

func (e End) MarshalJSON() ([]byte, error) { return e.T.MarshalJSON() }

type window struct {
	Start
	End
	Note string
}

func TestFingerprintReviewAmbiguousEmbeddedMarshalers(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	expectDifferent(t, window{Start{t0}, End{t0}, "n"}, window{Start{t0.Add(time.Hour)}, End{t0}, "n"})
}

// A3b: embedded time.Time next to another embedded time-like type.
type Stamp struct{ time.Time }
type twoTimes struct {
	time.Time
	Other Stamp
	Cents int
}

// A4: an embedded time.Time promotes MarshalJSON to the request.
type chargeAt struct {
	time.Time
	Cents int
}

func TestFingerprintReviewEmbeddedTimePromotes(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	expectDifferent(t, chargeAt{t0, 100}, chargeAt{t0, 999999})
}

// A5: omitzero with an IsZero method.
type Opt struct {
	Set bool
	V   int
}

func (o Opt) IsZero() bool { return !o.Set }

type optReq struct {
	O Opt `json:",omitzero"`
}

func TestFingerprintReviewOmitzeroIsZero(t *testing.T) {
	expectDifferent(t, optReq{Opt{false, 1}}, optReq{Opt{false, 2}})
}

// A6: omitempty treats -0 as empty.
type negZero struct {
	X float64 `json:",omitempty"`
}

func TestFingerprintReviewOmitemptyNegZero(t *testing.T) {
	expectDifferent(t, negZero{0}, negZero{math.Copysign(0, -1)})
}

// A6b: omitempty nil vs empty slice.
type sliceReq struct {
	S []int `json:",omitempty"`
}

func TestFingerprintReviewOmitemptyNilVsEmpty(t *testing.T) {
	expectDifferent(t, sliceReq{nil}, sliceReq{[]int{}})
}

// A7: string-kind map key with a lossy MarshalText, canonical path (an
// unexported field forces it). json uses the raw string for string keys.
type LKey string

func (k LKey) MarshalText() ([]byte, error) { return []byte(strings.ToLower(string(k))), nil }

type lkeyReq struct {
	M    map[LKey]int
	priv int //lint:ignore U1000 an unexported field sends the request down the canonical path
}

func TestFingerprintReviewCanonStringKeyMarshalText(t *testing.T) {
	expectDifferent(t, lkeyReq{M: map[LKey]int{"A": 1}}, lkeyReq{M: map[LKey]int{"a": 1}})
}

func TestFingerprintReviewCanonKeyOrderNondeterministic(t *testing.T) {
	r := lkeyReq{M: map[LKey]int{"A": 1, "a": 2, "b": 3, "B": 4, "c": 5, "C": 6}}
	rt, _ := runtime.New(memstore.New())
	first, _ := rt.FingerprintOf(r)
	for i := 0; i < 200; i++ {
		b, _ := rt.FingerprintOf(r)
		if !bytes.Equal(first, b) {
			t.Fatalf("the same request fingerprinted differently at try %d", i)
		}
	}
}

// A9: nil embedded pointer vs pointer to zero with omitempty fields.
type Inner struct {
	A int `json:",omitempty"`
}
type embPtr struct {
	*Inner
	X int
}

func TestFingerprintReviewEmbeddedNilPtr(t *testing.T) {
	expectDifferent(t, embPtr{nil, 1}, embPtr{&Inner{}, 1})
}

// A11: interface holding a typed nil pointer whose type has a value
// MarshalJSON, in the canonical path.
type nilIface struct {
	V    any
	priv int //lint:ignore U1000 an unexported field sends the request down the canonical path
}

func TestFingerprintReviewNilPtrInIface(t *testing.T) {
	var s *Start
	expectSame(t, nilIface{V: s}, nilIface{V: s})
}

// A12: a cycle through a map: json.Marshal errors; canonical encoding?
type cycReq struct {
	M map[string]any
}

func TestFingerprintReviewMapCycle(t *testing.T) {
	m := map[string]any{}
	m["self"] = m
	rt, _ := runtime.New(memstore.New())
	_, err := runtime.Do(context.Background(), rt, runtime.Call[cycReq, int]{Operation: "Op", Key: "k1",
		Request: cycReq{m}, Effect: func(ctx context.Context, r cycReq) (int, error) { return 1, nil }})
	if !errors.Is(err, runtime.ErrNotComparable) {
		t.Fatalf("Do with a cycle through a map: %v, want ErrNotComparable", err)
	}
}

// json.Marshal with the same cycle for comparison
func TestFingerprintReviewMapCycleFingerprintOf(t *testing.T) {
	m := map[string]any{}
	m["self"] = m
	rt, _ := runtime.New(memstore.New())
	if _, err := rt.FingerprintOf(cycReq{m}); err == nil {
		t.Fatal("FingerprintOf of a cycle through a map: no error")
	}
}

var _ = twoTimes{}

type strTag struct {
	N int64   `json:",string"`
	P *string `json:",string"`
}

func TestFingerprintReviewStringOpt(t *testing.T) {
	a, b := "x", "y"
	expectDifferent(t, strTag{1, &a}, strTag{1, &b})
	expectDifferent(t, strTag{1, nil}, strTag{2, nil})
}

type Gen[T any] struct {
	V T
	w T
}

func TestFingerprintReviewGeneric(t *testing.T) {
	expectDifferent(t, Gen[int]{1, 1}, Gen[int]{1, 2})
	expectSame(t, Gen[int]{1, 2}, Gen[int]{1, 2})
}

type node struct {
	Next any
	priv int //lint:ignore U1000 an unexported field sends the request down the canonical path
}

func TestFingerprintReviewDeepNesting(t *testing.T) {
	build := func(n, last int) node {
		var v any = last
		for i := 0; i < n; i++ {
			v = node{Next: v}
		}
		return v.(node)
	}
	expectSame(t, build(1500, 1), build(1500, 1))
	expectDifferent(t, build(1500, 1), build(1500, 2))
}

type ptrCycle struct {
	P    *ptrCycle
	priv int //lint:ignore U1000 an unexported field sends the request down the canonical path
}

func TestFingerprintReviewPtrCycle(t *testing.T) {
	a := &ptrCycle{}
	a.P = a
	rt, _ := runtime.New(memstore.New())
	_, err := runtime.Do(context.Background(), rt, runtime.Call[ptrCycle, int]{Operation: "Op", Key: "k1",
		Request: *a, Effect: func(ctx context.Context, r ptrCycle) (int, error) { return 1, nil }})
	if !errors.Is(err, runtime.ErrNotComparable) {
		t.Fatalf("Do with a cycle of pointers: %v, want ErrNotComparable", err)
	}
}
