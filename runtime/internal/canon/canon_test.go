package canon

import (
	"crypto/sha256"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

type (
	allExported struct {
		A string `json:"a,omitempty"`
		B []int
		C map[string]*allExported
		T time.Time
	}
	dash struct {
		A, B string `json:"-"`
	}
	unexported struct {
		A string
		b int
	}
	Base      struct{ Note string }
	shadowing struct {
		Base
		Note string
	}
	promoted struct {
		Base
		Amount int
	}
	withAny  struct{ V any }
	ptrText  struct{ s string }
	holdsPtr struct{ P ptrText }
	embPtr   struct{ *base }
	base     struct{ N int }
	recur    struct{ Next *recur }

	// What omitempty and omitzero leave out: one value (covered) or
	// several that differ (not).
	omitOne struct {
		S string  `json:",omitempty"`
		N int     `json:",omitempty"`
		P *int    `json:",omitempty"`
		Z [2]int  `json:",omitzero"`
		Q []int   `json:",omitzero"`
		T *string `json:",omitzero"`
	}
	omitEmptySlice struct {
		S []int `json:",omitempty"`
	}
	omitEmptyMap struct {
		M map[string]int `json:",omitempty"`
	}
	omitEmptyFloat struct {
		F float64 `json:",omitempty"`
	}
	omitZeroFloats struct {
		A [1]struct{ F float32 } `json:",omitzero"`
	}
	zeroer       struct{ Set, V bool }
	omitZeroerer struct {
		Z zeroer `json:",omitzero"`
	}
	// A nil embedded pointer and one to a struct whose fields are all
	// left out encode alike; one with a field always encoded does not.
	Sparse struct {
		A int `json:",omitempty"`
	}
	Dense         struct{ A int }
	embSparse     struct{ *Sparse }
	embDense      struct{ *Dense }
	ptrToNullable struct{ P *[]int }
	// Two embedded marshalers at one depth: neither method is promoted,
	// json promotes their fields, and T conflicts.
	MarshA   struct{ T int }
	MarshB   struct{ T int }
	twoMarsh struct {
		MarshA
		MarshB
	}
)

func (z zeroer) IsZero() bool               { return !z.Set }
func (MarshA) MarshalJSON() ([]byte, error) { return []byte(`"a"`), nil }
func (MarshB) MarshalJSON() ([]byte, error) { return []byte(`"b"`), nil }

func (p *ptrText) MarshalText() ([]byte, error) { return []byte(p.s), nil }

func TestInfo(t *testing.T) {
	tests := []struct {
		v                any
		covered, dynamic bool
	}{
		{allExported{}, true, false},
		{dash{}, false, false},
		{unexported{}, false, false},
		{shadowing{}, false, false},
		{promoted{}, true, false},
		{withAny{}, true, true},
		{holdsPtr{}, false, false}, // json encodes P as {} (not addressable): s is left out
		{&holdsPtr{}, true, false}, // through a pointer P is addressable: MarshalText
		{embPtr{}, false, false},   // json leaves out an unexported embedded pointer
		{recur{}, true, false},
		{[]unexported{}, false, false},
		{map[string]any{}, true, true},
		{omitOne{}, true, false},
		{omitEmptySlice{}, true, true},
		{omitEmptyMap{}, true, true},
		{omitEmptyFloat{}, true, true},
		{omitZeroFloats{}, true, true},
		{omitZeroerer{}, true, true},
		{embSparse{}, true, true},
		{embDense{}, true, false},
		{ptrToNullable{}, true, true},
		{twoMarsh{}, false, false},
	}
	var c Cache
	for _, tc := range tests {
		got := c.Info(reflect.TypeOf(tc.v))
		if got.Covered != tc.covered || got.Dynamic != tc.dynamic {
			t.Errorf("%T: %+v, want covered %v, dynamic %v", tc.v, got, tc.covered, tc.dynamic)
		}
	}
	// Two fields of one JSON name (vet refuses it in source): json drops both.
	str := reflect.TypeFor[string]()
	conflict := reflect.StructOf([]reflect.StructField{{Name: "X", Type: str, Tag: `json:"x"`}, {Name: "Y", Type: str, Tag: `json:"x"`}})
	if c.Info(conflict).Covered {
		t.Errorf("%v: covered, want not", conflict)
	}
	if !c.ValueCovered(reflect.ValueOf(withAny{V: allExported{}})) || c.ValueCovered(reflect.ValueOf(withAny{V: dash{}})) {
		t.Error("ValueCovered: an interface holding a covered value must be covered, one holding dash not")
	}
	negZero := math.Copysign(0, -1)
	var nilSlice []int
	values := []struct {
		v       any
		covered bool
	}{
		{withAny{V: []int(nil)}, false}, // null, as the nil interface is
		{withAny{V: []int{}}, true},
		{omitEmptySlice{}, true}, // nil: what the encoding stands for
		{omitEmptySlice{S: []int{}}, false},
		{omitEmptySlice{S: []int{1}}, true},
		{omitEmptyMap{}, true},
		{omitEmptyMap{M: map[string]int{}}, false},
		{omitEmptyFloat{}, true},
		{omitEmptyFloat{F: negZero}, false},
		{omitEmptyFloat{F: 1}, true},
		{omitZeroFloats{}, true},
		{omitZeroFloats{A: [1]struct{ F float32 }{{float32(negZero)}}}, false},
		{omitZeroerer{}, true},
		{omitZeroerer{Z: zeroer{V: true}}, false}, // IsZero holds it zero: left out
		{omitZeroerer{Z: zeroer{Set: true}}, true},
		{embSparse{}, true},
		{embSparse{&Sparse{}}, false},
		{ptrToNullable{}, true},
		{ptrToNullable{P: &nilSlice}, false},
		{ptrToNullable{P: &[]int{}}, true},
	}
	for _, tc := range values {
		if got := c.ValueCovered(reflect.ValueOf(tc.v)); got != tc.covered {
			t.Errorf("ValueCovered(%#v) = %v, want %v", tc.v, got, tc.covered)
		}
	}
}

func sum(t *testing.T, v any) ([]byte, error) {
	t.Helper()
	h := sha256.New()
	err := new(Cache).Write(h, reflect.ValueOf(v))
	return h.Sum(nil), err
}

func TestWriteRefuses(t *testing.T) {
	type withFunc struct{ f func() }
	type withChan struct {
		A  int
		ch chan int
	}
	loop := &recur{}
	loop.Next = loop
	tests := []struct {
		v    any
		want string
	}{
		{withFunc{f: func() {}}, "field f (func()): a func cannot be compared by value"},
		{withChan{ch: make(chan int)}, "field ch (chan int): a chan cannot be compared by value"},
		{loop, "field Next (*canon.recur): a cycle of pointers cannot be compared by value"},
	}
	for _, tc := range tests {
		_, err := sum(t, tc.v)
		if !errors.Is(err, ErrNotComparable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%T: %v, want %q", tc.v, err, tc.want)
		}
	}
	if _, err := sum(t, withFunc{}); err != nil {
		t.Errorf("a nil func: %v", err)
	}
}

// Values that differ only in what json ignores of them compare alike: a
// time by its instant and zone as MarshalJSON writes it (not its monotonic
// reading), map entries in any order.
func TestWriteEqualValues(t *testing.T) {
	now := time.Now()
	a, _ := sum(t, unexported{A: now.Format(time.RFC3339), b: 1})
	b, _ := sum(t, unexported{A: now.Format(time.RFC3339), b: 1})
	if string(a) != string(b) {
		t.Error("equal values, different sums")
	}
	type at struct{ when time.Time }
	x, _ := sum(t, at{now})
	y, _ := sum(t, at{now.Round(0)})
	if string(x) != string(y) {
		t.Error("a time with and without its monotonic reading: different sums")
	}
	m1 := map[string]int{}
	m2 := map[string]int{}
	for i := range 50 {
		m1[string(rune('a'+i))] = i
	}
	for i := 49; i >= 0; i-- {
		m2[string(rune('a'+i))] = i
	}
	p, _ := sum(t, struct{ m map[string]int }{m1})
	q, _ := sum(t, struct{ m map[string]int }{m2})
	if string(p) != string(q) {
		t.Error("equal maps, different sums")
	}
}

// Info from many goroutines, over more types than the recent list holds,
// answers as one walker would (run with -race).
func TestInfoConcurrent(t *testing.T) {
	types := []reflect.Type{reflect.TypeFor[allExported](), reflect.TypeFor[dash](), reflect.TypeFor[withAny]()}
	for i := range 20 {
		types = append(types, reflect.ArrayOf(i+1, reflect.TypeFor[unexported]()), reflect.ArrayOf(i+1, reflect.TypeFor[int]()))
	}
	var c Cache
	var want []TypeInfo
	for _, typ := range types {
		w := walker{c: new(Cache), seen: map[infoKey]bool{}}
		want = append(want, w.info(typ, false))
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for round := range 3 {
				for i := range types {
					j := (i + g + round) % len(types)
					if got := c.Info(types[j]); got != want[j] {
						t.Errorf("%v: %+v, want %+v", types[j], got, want[j])
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if n := len(*c.recent.Load()); n != maxRecent {
		t.Errorf("recent holds %d types, want %d", n, maxRecent)
	}
}

// A struct that embeds a type with MarshalJSON and has other fields: json
// encodes the embedded value alone (its method is promoted), so the other
// fields are not covered, and the canonical encoding compares them.
func TestPromotedMarshaler(t *testing.T) {
	type charge struct {
		time.Time
		Amount int
	}
	type onlyTime struct{ time.Time }
	var c Cache
	if c.Info(reflect.TypeFor[charge]()).Covered {
		t.Error("a struct embedding time.Time beside other fields: covered, want not (json encodes the time alone)")
	}
	if !c.Info(reflect.TypeFor[onlyTime]()).Covered {
		t.Error("a struct embedding time.Time alone: not covered, want covered")
	}
	at := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	a, _ := sum(t, charge{at, 100})
	b, _ := sum(t, charge{at, 999999})
	if string(a) == string(b) {
		t.Error("two amounts, one time: same canonical sum")
	}
	// A tag json does not accept names the field by its Go name: that
	// name can meet another field's.
	str := reflect.TypeFor[string]()
	bad := reflect.StructOf([]reflect.StructField{{Name: "X", Type: str, Tag: `json:"\\"`}, {Name: "Y", Type: str, Tag: `json:"X"`}})
	if c.Info(bad).Covered {
		t.Errorf("%v: covered, want not (both fields are named X)", bad)
	}
}
