package runtime_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

var (
	fpSeed  = flag.Uint64("fp.seed", 0, "seed of TestFingerprintProperty (0: a fixed list of seeds)")
	fpTypes = flag.Int("fp.types", 300, "random request types per seed in TestFingerprintProperty")
)

// Leaf types with methods json calls (reflect.StructOf cannot declare
// methods): a value receiver and a pointer receiver.
type (
	fpValJSON struct{ n int64 }
	fpPtrText struct{ s string }
	// Embedded types, exported (reflect.StructOf embeds named types):
	// their Note fields shadow or conflict with others of the same name.
	FpEmbA struct {
		Note   string
		Amount int64 `json:"amount,omitempty"`
	}
	// fpOpt's IsZero holds it zero whatever V: omitzero leaves it out.
	fpOpt struct {
		Set bool
		V   int64
	}
	FpEmbB struct {
		Note string
		tag  string
	}
)

var _ = FpEmbB{tag: ""} // set through reflection

func (o fpOpt) IsZero() bool                      { return !o.Set }
func (v fpValJSON) MarshalJSON() ([]byte, error)  { return []byte(strconv.FormatInt(v.n, 10)), nil }
func (p *fpPtrText) MarshalText() ([]byte, error) { return []byte("t:" + p.s), nil }

// fpGen builds random request types and values.
type fpGen struct {
	rng *rand.Rand
	n   int // fields made, for unique names
}

var fpLeaves = []reflect.Type{
	reflect.TypeFor[string](), reflect.TypeFor[int64](), reflect.TypeFor[uint8](), reflect.TypeFor[bool](),
	reflect.TypeFor[float64](), reflect.TypeFor[[]byte](), reflect.TypeFor[time.Time](),
	reflect.TypeFor[fpValJSON](), reflect.TypeFor[fpPtrText](), reflect.TypeFor[fpOpt](),
}

func (g *fpGen) typ(depth int) reflect.Type {
	if depth >= 3 || g.rng.IntN(3) == 0 {
		return fpLeaves[g.rng.IntN(len(fpLeaves))]
	}
	switch g.rng.IntN(7) {
	case 0:
		return reflect.PointerTo(g.typ(depth + 1))
	case 1:
		return reflect.SliceOf(g.typ(depth + 1))
	case 2:
		return reflect.ArrayOf(2, g.typ(depth+1))
	case 3:
		return reflect.MapOf(reflect.TypeFor[string](), g.typ(depth+1))
	case 4:
		return reflect.TypeFor[any]()
	}
	return g.structType(depth)
}

var fpTags = []string{``, ``, ``, `json:"-"`, `json:"a"`, `json:"a,omitempty"`, `json:",omitempty"`, `json:",omitzero"`, `json:"Note"`}

func (g *fpGen) structType(depth int) reflect.Type {
	var fields []reflect.StructField
	for i := range 1 + g.rng.IntN(5) {
		g.n++
		switch r := g.rng.IntN(10); {
		case r == 0 && i == 0:
			fields = append(fields, reflect.StructField{Name: "FpEmbA", Type: reflect.TypeFor[FpEmbA](), Anonymous: true})
			continue
		case r == 1 && i == 0:
			fields = append(fields, reflect.StructField{Name: "FpEmbB", Type: reflect.TypeFor[FpEmbB](), Anonymous: true})
			continue
		}
		f := reflect.StructField{Name: fmt.Sprintf("F%d", g.n), Type: g.typ(depth + 1), Tag: reflect.StructTag(fpTags[g.rng.IntN(len(fpTags))])}
		if g.rng.IntN(5) == 0 {
			f.Name, f.PkgPath = fmt.Sprintf("f%d", g.n), "github.com/idemkit/idem/runtime_test"
		}
		fields = append(fields, f)
	}
	return reflect.StructOf(fields)
}

// settable returns v settable, unexported or not (a test writes what the
// caller of a real request would have set).
func settable(v reflect.Value) reflect.Value {
	if v.CanSet() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

func (g *fpGen) fill(v reflect.Value, depth int) {
	v = settable(v)
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(g.rng.Int64N(1<<33), g.rng.Int64N(1e9)).UTC()))
		return
	case reflect.TypeFor[fpValJSON]():
		v.Set(reflect.ValueOf(fpValJSON{g.rng.Int64N(100)}))
		return
	case reflect.TypeFor[fpPtrText]():
		v.Set(reflect.ValueOf(fpPtrText{strconv.Itoa(g.rng.IntN(100))}))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString([]string{"", "a", "b", "é", "\x00"}[g.rng.IntN(5)])
	case reflect.Int64:
		v.SetInt(g.rng.Int64N(5) - 2)
	case reflect.Uint8:
		v.SetUint(uint64(g.rng.IntN(3)))
	case reflect.Bool:
		v.SetBool(g.rng.IntN(2) == 0)
	case reflect.Float64:
		v.SetFloat([]float64{0, 1.5, -2, 1e300}[g.rng.IntN(4)])
	case reflect.Pointer:
		if g.rng.IntN(4) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			g.fill(v.Elem(), depth+1)
		}
	case reflect.Slice:
		if g.rng.IntN(4) == 0 {
			return // nil
		}
		n := g.rng.IntN(3)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			g.fill(v.Index(i), depth+1)
		}
	case reflect.Array:
		for i := range v.Len() {
			g.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		if g.rng.IntN(4) == 0 {
			return
		}
		v.Set(reflect.MakeMap(v.Type()))
		for range g.rng.IntN(3) {
			e := reflect.New(v.Type().Elem()).Elem()
			g.fill(e, depth+1)
			v.SetMapIndex(reflect.ValueOf(strconv.Itoa(g.rng.IntN(4))), e)
		}
	case reflect.Interface:
		if g.rng.IntN(4) == 0 {
			return
		}
		t := fpLeaves[g.rng.IntN(len(fpLeaves))]
		if depth < 3 && g.rng.IntN(3) == 0 {
			t = g.structType(depth + 1)
		}
		e := reflect.New(t).Elem()
		g.fill(e, depth+1)
		v.Set(e)
	case reflect.Struct:
		for i := range v.NumField() {
			g.fill(v.Field(i), depth+1)
		}
	}
}

// mutate changes one part of v, chosen at random among all of them
// (unexported, skipped by JSON or not), so that v differs from what it
// was; it reports false when v has no part to change.
func (g *fpGen) mutate(v reflect.Value) (string, bool) {
	var spots []func() string
	var walk func(v reflect.Value, at string)
	walk = func(v reflect.Value, at string) {
		v = settable(v)
		spots = append(spots, func() string { return g.change(v, at) })
		switch v.Type() {
		case reflect.TypeFor[time.Time](), reflect.TypeFor[fpValJSON](), reflect.TypeFor[fpPtrText]():
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem(), at+".*")
			}
		case reflect.Slice, reflect.Array:
			if v.Type() == reflect.TypeFor[[]byte]() {
				return
			}
			for i := range v.Len() {
				walk(v.Index(i), fmt.Sprintf("%s[%d]", at, i))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), at+"."+v.Type().Field(i).Name)
			}
		}
	}
	walk(v, "")
	return spots[g.rng.IntN(len(spots))](), true
}

// change sets v to a value that differs from it.
func (g *fpGen) change(v reflect.Value, at string) string {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Second)))
		return at + " +1s"
	case reflect.TypeFor[fpValJSON]():
		v.Set(reflect.ValueOf(fpValJSON{v.Interface().(fpValJSON).n + 1}))
		return at + " n+1"
	case reflect.TypeFor[fpPtrText]():
		v.Set(reflect.ValueOf(fpPtrText{v.Interface().(fpPtrText).s + "x"}))
		return at + " s+x"
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint8:
		v.SetUint(v.Uint() + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Float64:
		if f := v.Float(); f == 0 && !math.Signbit(f) && g.rng.IntN(2) == 0 {
			v.SetFloat(math.Copysign(0, -1)) // omitempty and omitzero leave out both
			return at + " 0->-0"
		}
		v.SetFloat(v.Float()*2 + 1) // not +1: 1e300+1 == 1e300
	case reflect.Pointer:
		if v.IsNil() {
			// A pointer to a nil (a nil slice, map, pointer or
			// interface) is null to JSON, as nil is.
			v.Set(reflect.New(v.Type().Elem()))
			return at + " nil->new"
		}
		v.Set(reflect.Zero(v.Type()))
		return at + " ->nil"
	case reflect.Slice:
		if v.IsNil() {
			n := g.rng.IntN(2) // nil -> empty: omitempty leaves out both
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			return at + fmt.Sprintf(" nil->len %d", n)
		}
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		return at + " append"
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type())) // omitempty leaves out nil and empty
			if g.rng.IntN(2) == 0 {
				return at + " nil->empty"
			}
		}
		k := reflect.ValueOf("new" + strconv.Itoa(v.Len()))
		v.SetMapIndex(k, reflect.New(v.Type().Elem()).Elem())
		return at + " new key"
	case reflect.Interface:
		if v.IsNil() {
			if g.rng.IntN(2) == 0 {
				v.Set(reflect.ValueOf([]int(nil))) // null to JSON, as nil is
				return at + " nil->[]int(nil)"
			}
			v.Set(reflect.ValueOf("x"))
			return at + " nil->x"
		}
		v.Set(reflect.Zero(v.Type()))
		return at + " ->nil"
	case reflect.Array, reflect.Struct:
		// No change of its own: change a part, or the value is the same
		// (an empty struct, a zero-length array).
		if v.Kind() == reflect.Struct && v.NumField() > 0 {
			return g.change(settable(v.Field(0)), at+"."+v.Type().Field(0).Name)
		}
		if v.Kind() == reflect.Array && v.Len() > 0 {
			return g.change(settable(v.Index(0)), at+"[0]")
		}
		return ""
	}
	return at
}

// TestFingerprintProperty: over random request types (unexported fields,
// json:"-", omitempty and omitzero, embedded structs whose fields shadow
// or conflict, MarshalJSON on a value receiver, MarshalText on a pointer
// receiver, time.Time, maps, interfaces, pointers, slices, arrays), two
// requests built alike fingerprint alike, and a request with any one part
// changed fingerprints differently, whether or not JSON shows the change.
// Replay a failure with -fp.seed. (reflect.StructOf cannot embed a type
// with methods, so an embedded time.Time, whose MarshalJSON json promotes,
// is TestFingerprintCoversWhatJSONSkips's case.)
func TestFingerprintProperty(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if *fpSeed != 0 {
		seeds = []uint64{*fpSeed}
	}
	fp := func(v reflect.Value) []byte {
		b, err := rt.FingerprintOf(v.Interface())
		if err != nil {
			t.Fatalf("%v: %v", v.Type(), err)
		}
		return b
	}
	var hidden, mutations int
	for _, seed := range seeds {
		g := &fpGen{rng: rand.New(rand.NewPCG(seed, 31))}
		for i := range *fpTypes {
			typ := g.structType(0)
			valSeed := g.rng.Uint64()
			mk := func() reflect.Value {
				v := reflect.New(typ).Elem()
				(&fpGen{rng: rand.New(rand.NewPCG(valSeed, 7))}).fill(v, 0)
				return v
			}
			a, b := mk(), mk()
			if _, err := json.Marshal(a.Interface()); err != nil {
				t.Fatalf("seed %d type %d: %v", seed, i, err)
			}
			if !bytes.Equal(fp(a), fp(b)) {
				t.Fatalf("seed %d type %d %v: two requests built alike fingerprint differently", seed, i, typ)
			}
			what, _ := g.mutate(b)
			if what == "" {
				continue
			}
			mutations++
			ja, _ := json.Marshal(a.Interface())
			jb, _ := json.Marshal(b.Interface())
			if bytes.Equal(ja, jb) {
				hidden++
			}
			if bytes.Equal(fp(a), fp(b)) {
				t.Fatalf("seed %d type %d %v: changed%s, same fingerprint (JSON %s)", seed, i, typ, what, ja)
			}
		}
	}
	t.Logf("%d changes, %d of them invisible to JSON", mutations, hidden)
	if mutations < len(seeds)**fpTypes/2 || hidden < mutations/10 {
		t.Fatalf("%d changes, %d invisible to JSON: the generator no longer reaches what the test is for", mutations, hidden)
	}
}
