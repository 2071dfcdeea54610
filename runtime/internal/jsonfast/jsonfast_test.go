//lint:file-ignore SA5008 the tests exercise the tags json treats unusually

//go:build !goexperiment.jsonv2

package jsonfast

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The types the differential tests encode and decode: every kind of the
// subset, nested, behind pointers and in slices, with omitempty, names json
// escapes and names it rejects.
type (
	Name  string
	Small struct {
		S string `json:"s"`
		N int    `json:"n,omitempty"`
	}
	Ints struct {
		I   int
		I8  int8
		I16 int16
		I32 int32
		I64 int64
		U   uint
		U8  uint8
		U16 uint16
		U32 uint32
		U64 uint64
		UP  uintptr
	}
	Omit struct {
		S  string   `json:"s,omitempty"`
		B  bool     `json:"b,omitempty"`
		I  int16    `json:"i,omitempty"`
		U  uint64   `json:"u,omitempty"`
		P  *Small   `json:"p,omitempty"`
		L  []string `json:"l,omitempty"`
		St Small    `json:"st,omitempty"` // a struct is never empty
	}
	Names struct {
		HTML     string `json:"<a&b>"`
		Bad      string `json:"a\"b"` // not a valid tag: the field's name
		Empty    string `json:",omitempty"`
		Dash     string `json:"-,"`
		Skip     string `json:"-"`
		unexp    string
		Unicode  string `json:"ключ"`
		Punct    string `json:"!#$%()*+-./:;=?@[]^_{|}~ "`
		NoTag    bool
		Repeated string `json:"x,omitempty,omitempty"`
	}
	Nested struct {
		A  Small
		P  *Small
		PP **int32
		L  []Small
		LP []*Small
		LL [][]int8
		N  Name
		NS []Name
		B  bool
	}
	Deep struct {
		In struct {
			Out *struct {
				V []uint16 `json:"v"`
			} `json:"out"`
		} `json:"in"`
	}
	Empty struct{}
	Bytes struct {
		B  []byte `json:"b"`
		O  []byte `json:"o,omitempty"`
		NB NamedBytes
		LB [][]byte
		P  *[]byte
	}
	NamedBytes []byte
	Header     map[string][]string
	Maps       struct {
		H  Header
		HS map[string][]string `json:"hs,omitempty"`
		S  map[string]string   `json:"s,omitempty"`
		M  map[Name]Small
		MP map[string]*Small `json:"mp,omitempty"`
		MB map[string][]byte
		MM map[string]map[string]int8
	}
	// Unm is decoded by its UnmarshalJSON, which keeps the bytes it is given.
	Unm struct {
		Status int                 `json:"status"`
		Header map[string][]string `json:"header"`
		Body   []byte              `json:"body"`
		More   bool                `json:"more,omitempty"`
		Raw    string              `json:"-"`
	}
)

func (u *Unm) UnmarshalJSON(b []byte) error {
	type plain Unm
	if err := json.Unmarshal(b, (*plain)(u)); err != nil {
		return err
	}
	u.Raw = string(b)
	return nil
}

var _ = Names{unexp: ""} // decoded as json does: never

// fuzzTypes are the types the fuzz targets pick from.
var fuzzTypes = []reflect.Type{
	reflect.TypeFor[Small](),
	reflect.TypeFor[Ints](),
	reflect.TypeFor[Omit](),
	reflect.TypeFor[Names](),
	reflect.TypeFor[Nested](),
	reflect.TypeFor[Deep](),
	reflect.TypeFor[Empty](),
	reflect.TypeFor[string](),
	reflect.TypeFor[[]int64](),
	reflect.TypeFor[*Small](),
	reflect.TypeFor[[]*Ints](),
	reflect.TypeFor[bool](),
	reflect.TypeFor[Bytes](),
	reflect.TypeFor[Maps](),
	reflect.TypeFor[Unm](),
	reflect.TypeFor[map[string][]string](),
	reflect.TypeFor[[]byte](),
}

// codecs are Encode and Decode for each of fuzzTypes, through the generic
// entry points the runtime uses.
var codecs = map[reflect.Type]struct {
	encode func(p *Plan, v reflect.Value) []byte // v: a pointer
	decode func(p *Plan, data []byte) (reflect.Value, bool)
}{}

func register[T any]() {
	codecs[reflect.TypeFor[T]()] = struct {
		encode func(p *Plan, v reflect.Value) []byte
		decode func(p *Plan, data []byte) (reflect.Value, bool)
	}{
		encode: func(p *Plan, v reflect.Value) []byte { return Encode(p, nil, v.Interface().(*T)) },
		decode: func(p *Plan, data []byte) (reflect.Value, bool) {
			v := new(T)
			ok := Decode(p, data, v)
			return reflect.ValueOf(v), ok
		},
	}
}

func init() {
	register[Small]()
	register[Ints]()
	register[Omit]()
	register[Names]()
	register[Nested]()
	register[Deep]()
	register[Empty]()
	register[string]()
	register[[]int64]()
	register[*Small]()
	register[[]*Ints]()
	register[bool]()
	register[Bytes]()
	register[Maps]()
	register[Unm]()
	register[map[string][]string]()
	register[[]byte]()
}

// filler makes values from fuzz bytes.
type filler struct{ b []byte }

func (f *filler) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *filler) u64() uint64 {
	var w [8]byte
	n := copy(w[:], f.b)
	f.b = f.b[n:]
	switch w[0] & 3 { // extremes more often than chance would
	case 1:
		return math.MaxUint64
	case 2:
		return 1 << 63
	}
	return binary.LittleEndian.Uint64(w[:]) >> (w[1] & 63)
}

// fill sets v (settable) from the bytes; depth bounds nesting.
func (f *filler) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		n := int(f.next() % 24)
		n = min(n, len(f.b))
		v.SetString(string(f.b[:n]))
		f.b = f.b[n:]
	case reflect.Bool:
		v.SetBool(f.next()&1 == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.u64()) >> (64 - 8*v.Type().Size())) // within range, signs included
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(f.u64() >> (64 - 8*v.Type().Size()))
	case reflect.Pointer:
		if depth > 4 || f.next()&3 == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem(), depth+1)
	case reflect.Slice:
		c := f.next()
		if depth > 4 || c&7 == 0 {
			return // nil
		}
		n := int(c>>3) % 4
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			f.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		c := f.next()
		if depth > 4 || c&7 == 0 {
			return // nil
		}
		v.Set(reflect.MakeMap(v.Type()))
		for range int(c>>3) % 5 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k, depth+1)
			f.fill(e, depth+1)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	}
}

// FuzzEncode: Encode writes json.Marshal's bytes for values of every type
// of fuzzTypes, and Decode accepts them back as json.Unmarshal decodes them.
func FuzzEncode(f *testing.F) {
	for i := range fuzzTypes {
		f.Add(uint8(i), []byte("\x05<a&>\u2028\xff\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"))
		f.Add(uint8(i), []byte("\x10\x1f\"\\\t\b\f\r\n\u2029\ufffd\xed\xa0\x80\xc0é"))
		f.Add(uint8(i), bytes.Repeat([]byte{0xff, 0x01, 0x02}, 40))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		typ := fuzzTypes[int(which)%len(fuzzTypes)]
		p := Build(typ)
		if p == nil {
			t.Fatalf("no plan for %v", typ)
		}
		v := reflect.New(typ)
		(&filler{data}).fill(v.Elem(), 0)
		c := codecs[typ]
		got := c.encode(p, v)
		want, err := json.Marshal(v.Elem().Interface())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v %#v:\nEncode       %q\njson.Marshal %q", typ, v.Elem().Interface(), got, want)
		}
		// Decode must accept what Encode wrote when it is canonical: what
		// json writes for the value json reads from it. (Map keys of
		// invalid UTF-8 are not: they read back as U+FFFD, in another
		// order or as one key.)
		back := reflect.New(typ)
		if err := json.Unmarshal(got, back.Interface()); err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(back.Elem().Interface())
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, typ, got, bytes.Equal(again, got))
	})
}

// FuzzDecode: whatever Decode accepts, json.Unmarshal decodes to the same
// value.
func FuzzDecode(f *testing.F) {
	for i, s := range []string{
		`{"s":"x","n":1}`, `{"s":"\u003c\u2028\ufffd\n\u001f"}`, `{"s":"","n":-0}`, `{"s":"a", "n":1}`,
		`{"I":-128,"I8":-128,"I16":32767,"I32":-2147483648,"I64":-9223372036854775808,"U":18446744073709551615,"U8":255,"U16":0,"U32":4294967295,"U64":0,"UP":1}`,
		`{"i":1,"p":{"s":"x"},"l":[],"st":{"s":""}}`, `{"st":{"s":"","n":0}}`,
		`{"\u003ca\u0026b\u003e":"","Bad":"","Empty":"","-":"","ключ":"","!#$%()*+-./:;=?@[]^_{|}~ ":"","NoTag":false}`,
		`{"A":{"s":""},"P":null,"PP":null,"L":[{"s":"é"}],"LP":[null],"LL":[[1,-2],null,[]],"N":"n","NS":null,"B":true}`,
		`{"in":{"out":{"v":[65535]}}}`, `{}`, `"\ud800"`, `[1,2,3]`, `null`, `[null,{"I":1}]`, `true`,
	} {
		f.Add(uint8(i), []byte(s))
	}
	for typ, s := range map[reflect.Type]string{ // near the canonical forms of maps, []byte, an Unmarshaler
		reflect.TypeFor[Bytes]():               `{"b":"+/8=","o":"AA==","NB":"","LB":[null,"YQ=="],"P":null}`,
		reflect.TypeFor[Maps]():                `{"H":{"A":null,"B":["\u003c"]},"s":{"a":""},"M":{"":{"s":""}},"mp":{"a":null},"MB":{"a":"AA=="},"MM":{"a":{"b":1}}}`,
		reflect.TypeFor[Unm]():                 `{"status":200,"header":{"A":["b"]},"body":"YQ==","more":true}`,
		reflect.TypeFor[map[string][]string](): `{"a":["1","2"],"b":null,"c":[]}`,
		reflect.TypeFor[[]byte]():              `"AAEC/w=="`,
	} {
		f.Add(uint8(slices.Index(fuzzTypes, typ)), []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		checkDecode(t, fuzzTypes[int(which)%len(fuzzTypes)], data, false)
	})
}

// FuzzDecodeEdited: as FuzzDecode, on Encode's output for a value made from
// the fuzz bytes, with one byte replaced, inserted or deleted: inputs near
// the canonical form, which Decode often accepts (a digit or a letter
// changed) and must otherwise turn down.
func FuzzDecodeEdited(f *testing.F) {
	for i := range fuzzTypes {
		f.Add(uint8(i), []byte("\x05<a&>\u2028\xff\x01\x02\x03"), uint16(3), byte('1'), uint8(0))
		f.Add(uint8(i), []byte("\x10\x1f\"\\\t\b\f\r"), uint16(7), byte(' '), uint8(1))
		f.Add(uint8(i), bytes.Repeat([]byte{0xff, 0x01, 0x02}, 20), uint16(12), byte(0), uint8(2))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte, pos uint16, c byte, op uint8) {
		typ := fuzzTypes[int(which)%len(fuzzTypes)]
		v := reflect.New(typ)
		(&filler{data}).fill(v.Elem(), 0)
		b := codecs[typ].encode(Build(typ), v)
		i := int(pos) % (len(b) + 1)
		switch op % 3 {
		case 0:
			if i == len(b) {
				return
			}
			b[i] = c
		case 1:
			b = append(b[:i], append([]byte{c}, b[i:]...)...)
		case 2:
			if i == len(b) {
				return
			}
			b = append(b[:i], b[i+1:]...)
		}
		checkDecode(t, typ, b, false)
	})
}

// checkDecode decodes data as typ with Decode and json.Unmarshal; when
// Decode accepts (it must when mustAccept), the results are deeply equal.
func checkDecode(t *testing.T, typ reflect.Type, data []byte, mustAccept bool) {
	t.Helper()
	got, ok := codecs[typ].decode(Build(typ), data)
	if !ok {
		if mustAccept {
			t.Fatalf("%v: Decode rejects %q, which Encode wrote", typ, data)
		}
		return
	}
	want := reflect.New(typ)
	if err := json.Unmarshal(data, want.Interface()); err != nil {
		t.Fatalf("%v: Decode accepts %q, json.Unmarshal says %v", typ, data, err)
	}
	if !reflect.DeepEqual(got.Interface(), want.Interface()) {
		t.Fatalf("%v %q:\nDecode         %#v\njson.Unmarshal %#v", typ, data, got.Elem().Interface(), want.Elem().Interface())
	}
}

type (
	valueMarshaler struct{ N int }
	ptrMarshaler   struct{ N int }
	ptrText        struct{ N int }
	ptrUnmarshaler struct{ N int }
	ptrTextUnm     struct{ N int }
	named          int
	textKey        string
	valueUnm       map[string]int
	unmMarshaler   struct{ N int }
	unmText        struct{ N int }
	textByte       byte
	jsonByte       byte
	recursive      struct{ Next *recursive }
	recursiveSlice struct{ Kids []recursiveSlice }
	embedded       struct{ Small }
	embeddedPtr    struct{ *Small }
	unexpEmbedded  struct{ small }
	small          struct{ S string }
)

func (valueMarshaler) MarshalJSON() ([]byte, error) { return []byte("1"), nil }
func (*ptrMarshaler) MarshalJSON() ([]byte, error)  { return []byte("1"), nil }
func (*ptrText) MarshalText() ([]byte, error)       { return []byte("t"), nil }
func (*ptrUnmarshaler) UnmarshalJSON([]byte) error  { return nil }
func (*ptrTextUnm) UnmarshalText([]byte) error      { return nil }
func (*textKey) UnmarshalText([]byte) error         { return nil }
func (valueUnm) UnmarshalJSON([]byte) error         { return nil }
func (*unmMarshaler) UnmarshalJSON([]byte) error    { return nil }
func (unmMarshaler) MarshalJSON() ([]byte, error)   { return []byte("1"), nil }
func (*unmText) UnmarshalJSON([]byte) error         { return nil }
func (unmText) MarshalText() ([]byte, error)        { return []byte("t"), nil }
func (textByte) MarshalText() ([]byte, error)       { return []byte("t"), nil }
func (*jsonByte) UnmarshalJSON([]byte) error        { return nil }
func (named) String() string                        { return "named" } // not one json calls

// TestBuild: which types have a plan. Those that do not are every type
// json treats in a way the plans do not reproduce.
func TestBuild(t *testing.T) {
	tests := []struct {
		typ  reflect.Type
		want bool
	}{
		{reflect.TypeFor[Small](), true},
		{reflect.TypeFor[Nested](), true},
		{reflect.TypeFor[named](), true},
		{reflect.TypeFor[[]named](), true},
		{reflect.TypeFor[map[string]int](), true},
		{reflect.TypeFor[map[Name]Small](), true},
		{reflect.TypeFor[map[int]string](), false},  // json writes the number as a key
		{reflect.TypeFor[map[textKey]int](), false}, // json encodes the string, decodes by UnmarshalText
		{reflect.TypeFor[map[string]float64](), false},
		{reflect.TypeFor[Unm](), true},
		{reflect.TypeFor[ptrUnmarshaler](), true},
		{reflect.TypeFor[struct{ U Unm }](), false}, // only at the root
		{reflect.TypeFor[[]Unm](), false},
		{reflect.TypeFor[valueUnm](), true},
		{reflect.TypeFor[unmMarshaler](), false},
		{reflect.TypeFor[unmText](), false},
		{reflect.TypeFor[[]textByte](), false},
		{reflect.TypeFor[[]jsonByte](), false},
		{reflect.TypeFor[NamedBytes](), true},
		{reflect.TypeFor[any](), false},
		{reflect.TypeFor[struct{ A any }](), false},
		{reflect.TypeFor[float64](), false},
		{reflect.TypeFor[struct{ F float32 }](), false},
		{reflect.TypeFor[[]byte](), true},
		{reflect.TypeFor[struct{ B []uint8 }](), true},
		{reflect.TypeFor[[2]int](), false},
		{reflect.TypeFor[time.Time](), false},
		{reflect.TypeFor[struct{ T time.Time }](), false},
		{reflect.TypeFor[json.RawMessage](), false},
		{reflect.TypeFor[json.Number](), false},
		{reflect.TypeFor[valueMarshaler](), false},
		{reflect.TypeFor[ptrMarshaler](), false},
		{reflect.TypeFor[struct{ M ptrMarshaler }](), false},
		{reflect.TypeFor[[]ptrText](), false},
		{reflect.TypeFor[*ptrUnmarshaler](), false},
		{reflect.TypeFor[struct{ U ptrTextUnm }](), false},
		{reflect.TypeFor[recursive](), false},
		{reflect.TypeFor[recursiveSlice](), false},
		{reflect.TypeFor[embedded](), false},
		{reflect.TypeFor[embeddedPtr](), false},
		{reflect.TypeFor[unexpEmbedded](), false},
		{reflect.TypeFor[struct {
			A int `json:"a,string"`
		}](), false},
		{reflect.TypeFor[struct {
			A int `json:"a,omitzero"`
		}](), false},
		{reflect.TypeFor[struct {
			A int `json:"a,omitempty,future"`
		}](), false},
		{reflect.StructOf([]reflect.StructField{ // vet rejects the literal
			{Name: "A", Type: reflect.TypeFor[int](), Tag: `json:"x"`},
			{Name: "B", Type: reflect.TypeFor[int](), Tag: `json:"x"`},
		}), false},
		{reflect.TypeFor[struct {
			A int
			B int `json:"A"`
		}](), false},
		{reflect.TypeFor[struct {
			A int `json:"a"`
			B int `json:"A"`
		}](), true},
		{reflect.TypeFor[chan int](), false},
		{reflect.TypeFor[func()](), false},
		{reflect.TypeFor[complex128](), false},
	}
	for _, tc := range tests {
		if got := Build(tc.typ) != nil; got != tc.want {
			t.Errorf("Build(%v): plan %v, want %v", tc.typ, got, tc.want)
		}
	}
}

// TestEncodeMatchesMarshal: chosen values, byte for byte json.Marshal's.
func TestEncodeMatchesMarshal(t *testing.T) {
	i32 := int32(-7)
	pi := &i32
	tests := []any{
		Small{S: "<script>&\u2028\u2029\x00\x1f\x7f\xff\xfe é 😀 \ufffd"},
		Small{S: "\"\\/\b\f\n\r\t", N: -1},
		Ints{I: math.MinInt64, I8: math.MinInt8, I16: math.MaxInt16, I32: math.MinInt32, I64: math.MaxInt64,
			U: math.MaxUint64, U8: math.MaxUint8, U16: math.MaxUint16, U32: math.MaxUint32, U64: math.MaxUint64, UP: 1},
		Omit{}, Omit{S: "s", B: true, I: -1, U: 1, P: &Small{}, L: []string{}}, Omit{L: []string{""}},
		Names{HTML: "h", Bad: "b", Empty: "e", Dash: "d", Skip: "never", unexp: "never", Unicode: "u", Punct: "p", NoTag: true, Repeated: "r"},
		Nested{}, Nested{P: &Small{S: "p"}, PP: &pi, L: []Small{{}, {N: 2}}, LP: []*Small{nil, {}}, LL: [][]int8{nil, {}, {1, -128}}, NS: []Name{"a", ""}},
		Deep{}, Empty{}, "", []int64{}, []int64(nil), (*Small)(nil), []*Ints{nil}, false,
	}
	for _, v := range tests {
		checkEncode(t, v)
	}
}

// checkEncode: Encode writes json.Marshal's bytes for v, and Decode accepts
// them as json.Unmarshal decodes them.
func checkEncode(t *testing.T, v any) {
	t.Helper()
	pv := reflect.New(reflect.TypeOf(v))
	pv.Elem().Set(reflect.ValueOf(v))
	c, ok := codecs[reflect.TypeOf(v)]
	if !ok {
		t.Fatalf("%T not registered", v)
	}
	got := c.encode(Build(reflect.TypeOf(v)), pv)
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%T %+v:\nEncode       %s\njson.Marshal %s", v, v, got, want)
	}
	checkDecode(t, reflect.TypeOf(v), got, true)
}

// TestDecodeCanonicalOnly: Decode turns down what json accepts but does not
// write, so that encoding/json decides it.
func TestDecodeCanonicalOnly(t *testing.T) {
	p := Build(reflect.TypeFor[Small]())
	for _, tc := range []struct {
		data string
		want bool
	}{
		{`{"s":"x","n":1}`, true},
		{`{"s":"x"}`, true},
		{`{"s":"\u003c\u2028\ufffd\n\"\\\u001f"}`, true},
		{`{"s":"x","n":0}`, false},  // json omits it
		{`{"n":1,"s":"x"}`, false},  // another order
		{`{"s":"x","n":1} `, false}, // space
		{` {"s":"x"}`, false},
		{`{"s": "x"}`, false},
		{`{"S":"x"}`, false}, // json folds case
		{`{"s":"x","s":"y"}`, false},
		{`{"s":"x","n":1,"z":2}`, false},
		{`{}`, false},
		{`{"s":"x","n":-0}`, false},
		{`{"s":"x","n":01}`, false},
		{`{"s":"x","n":1.0}`, false},
		{`{"s":"x","n":1e2}`, false},
		{`{"s":"x","n":+1}`, false},
		{`{"s":"x","n":9223372036854775808}`, false},
		{`{"s":"x","n":-9223372036854775808}`, true},
		{`{"s":"x","n":99999999999999999999}`, false},
		{`{"s":"\u003C"}`, false}, // upper-case hex
		{`{"s":"\/"}`, false},
		{`{"s":"\u0041"}`, false}, // json writes A
		{`{"s":"\u0008"}`, false}, // json writes \b
		{`{"s":"\ud83d\ude00"}`, false},
		{`{"s":"<"}`, false},
		{"{\"s\":\"\u2028\"}", false},
		{"{\"s\":\"\xff\"}", false},
		{"{\"s\":\"\x01\"}", false},
		{`{"s":"x"`, false},
		{`{"s":"x`, false},
		{`{"s":"\u00`, false},
		{`{"s":"\`, false},
		{`null`, false},
		{``, false},
	} {
		var v Small
		if got := Decode(p, []byte(tc.data), &v); got != tc.want {
			t.Errorf("Decode(%s): %v, want %v", tc.data, got, tc.want)
		}
		if tc.want {
			checkDecode(t, reflect.TypeFor[Small](), []byte(tc.data), true)
		}
	}
	var n Nested
	if !Decode(Build(reflect.TypeFor[Nested]()), []byte(`{"A":{"s":""},"P":null,"PP":null,"L":[],"LP":null,"LL":null,"N":"","NS":null,"B":false}`), &n) || n.L == nil {
		t.Errorf("[] decodes to %#v, want an empty non-nil slice", n.L)
	}
}

// TestCacheFor: For returns one plan per type, and nil for a type outside
// the subset, past Cache.recent's room too, from goroutines at once.
func TestCacheFor(t *testing.T) {
	var c Cache
	lookups := []func() (*Plan, reflect.Type){
		cacheCase[Small](&c), cacheCase[Ints](&c), cacheCase[Omit](&c), cacheCase[Names](&c), cacheCase[Nested](&c),
		cacheCase[Deep](&c), cacheCase[Empty](&c), cacheCase[string](&c), cacheCase[[]int64](&c), cacheCase[*Small](&c),
		cacheCase[[]*Ints](&c), cacheCase[bool](&c), cacheCase[int8](&c), cacheCase[int16](&c), cacheCase[map[string]int](&c),
		cacheCase[uint](&c), cacheCase[[]string](&c), cacheCase[*Ints](&c), cacheCase[any](&c), cacheCase[int32](&c),
	}
	if len(lookups) <= maxRecent {
		t.Fatalf("%d types do not fill Cache.recent (%d)", len(lookups), maxRecent)
	}
	first := make([]*Plan, len(lookups))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 3 {
				for k := range lookups {
					i := (k + g*5) % len(lookups)
					p, typ := lookups[i]()
					if (p != nil) != (Build(typ) != nil) || p != nil && p.Type() != typ {
						t.Errorf("For[%v] = %v", typ, p)
					}
					if g == 0 && round == 0 {
						first[i] = p
					} else if g == 0 && p != first[i] {
						t.Errorf("For[%v]: another plan on round %d", typ, round)
					}
				}
			}
		})
	}
	wg.Wait()
	if r := c.recent.Load(); r == nil || len(*r) != maxRecent {
		t.Errorf("Cache.recent holds %v", r)
	}
	if !strings.Contains(Build(reflect.TypeFor[Names]()).root.fields[0].key, `\u003ca\u0026b\u003e`) {
		t.Errorf("key %s", Build(reflect.TypeFor[Names]()).root.fields[0].key)
	}
}

func cacheCase[T any](c *Cache) func() (*Plan, reflect.Type) {
	return func() (*Plan, reflect.Type) { return For[T](c), reflect.TypeFor[T]() }
}

// TestBuildSharesNodes: a type that recurs in a plan is built once (a
// plan's size stays linear in the types, not in the paths to them).
func TestBuildSharesNodes(t *testing.T) {
	type leaf struct{ A, B, C string }
	type l1 struct{ A, B, C, D leaf }
	type l2 struct{ A, B, C, D l1 }
	type l3 struct{ A, B, C, D []l2 }
	p := Build(reflect.TypeFor[l3]())
	if p == nil {
		t.Fatal("no plan")
	}
	l2n := p.root.fields[0].node.elem
	if p.root.fields[3].node.elem != l2n || l2n.fields[0].node != l2n.fields[3].node {
		t.Error("a type that recurs has a node per use")
	}
}

// TestEncodeMapsBytes: maps (keys sorted as Go strings before escaping,
// escaped as strings) and byte slices (standard base64), byte for byte
// json.Marshal's.
func TestEncodeMapsBytes(t *testing.T) {
	many := map[string][]string{}
	for i := range 40 { // past the keys encode sorts without an allocation
		many[string(rune('z'-i%26))+strings.Repeat("k", i)] = []string{"v"}
	}
	b := []byte{0xfb, 0xff, 0xbf} // "+/+/" in base64, "-_-_" in its URL form
	tests := []any{
		Bytes{}, Bytes{B: []byte{}, O: []byte{}, NB: NamedBytes{}, LB: [][]byte{nil, {}, b}, P: &b},
		Bytes{B: b, O: []byte{0}, NB: NamedBytes("ab"), P: new([]byte)},
		Maps{}, Maps{H: Header{}, HS: map[string][]string{}, S: map[string]string{}, M: map[Name]Small{}, MP: map[string]*Small{}},
		Maps{
			H:  Header{"b": {"1"}, "B": nil, "a": {}, "<&>": {"<"}, "é": {"x", "y"}, "\u2028": {""}, "": {"e"}},
			HS: many,
			S:  map[string]string{"z": "1", "a": "\x00", "Z": "<"},
			M:  map[Name]Small{"n": {S: "s"}, "m": {}},
			MP: map[string]*Small{"nil": nil, "p": {N: 1}},
			MB: map[string][]byte{"b": b, "nil": nil, "e": {}},
			MM: map[string]map[string]int8{"x": {"b": 1, "a": -1}, "y": nil, "z": {}},
		},
		map[string][]string(nil), map[string][]string{"k": nil}, []byte(nil), []byte{}, b,
		Unm{}, Unm{Status: 200, Header: map[string][]string{"A": {"b"}}, Body: b, More: true},
	}
	for _, v := range tests {
		checkEncode(t, v)
	}
}

// TestDecodeMapsBytesCanonicalOnly: Decode turns down maps and byte slices
// json decodes but does not write, and calls UnmarshalJSON only with one
// value and no space around it.
func TestDecodeMapsBytesCanonicalOnly(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		data string
		want bool
	}{
		{reflect.TypeFor[map[string][]string](), `{"a":["1"],"b":null,"c":[]}`, true},
		{reflect.TypeFor[map[string][]string](), `{}`, true},
		{reflect.TypeFor[map[string][]string](), `null`, true},
		{reflect.TypeFor[map[string][]string](), `{"":[],"\u003c":[""]}`, true},
		{reflect.TypeFor[map[string][]string](), `{"b":[],"a":[]}`, false}, // unsorted
		{reflect.TypeFor[map[string][]string](), `{"a":[],"a":["x"]}`, false},
		{reflect.TypeFor[map[string][]string](), `{"a":[] }`, false},
		{reflect.TypeFor[map[string][]string](), `{"a":[],}`, false},
		{reflect.TypeFor[map[string][]string](), `{"<":[]}`, false},
		{reflect.TypeFor[map[string][]string](), `{"a":[]`, false},
		{reflect.TypeFor[map[string][]string](), `{"a":"x"}`, false},
		{reflect.TypeFor[Maps](), `{"H":{"B":null,"a":["x"]},"M":{"a":{"s":""},"b":{"s":"x","n":1}},"MB":{"a":"AA==","b":null},"MM":{"x":{"a":1,"b":-1},"y":null}}`, true},
		{reflect.TypeFor[Maps](), `{"H":null,"s":{},"M":null,"MB":null,"MM":null}`, false}, // an empty omitempty map
		{reflect.TypeFor[Maps](), `{"H":null,"M":{"b":{"s":""},"a":{"s":""}},"MB":null,"MM":null}`, false},
		{reflect.TypeFor[[]byte](), `"+/+/"`, true},
		{reflect.TypeFor[[]byte](), `""`, true},
		{reflect.TypeFor[[]byte](), `"AA=="`, true},
		{reflect.TypeFor[[]byte](), `"-_-_"`, false}, // URL encoding: json errs
		{reflect.TypeFor[[]byte](), `"AB=="`, false}, // bits json never writes
		{reflect.TypeFor[[]byte](), `"AA"`, false},
		{reflect.TypeFor[[]byte](), `"AA==\r\n"`, false},
		{reflect.TypeFor[[]byte](), `"A\u0041=="`, false},
		{reflect.TypeFor[[]byte](), `[1,2]`, false},
		{reflect.TypeFor[[]byte](), `"AA=`, false},
		{reflect.TypeFor[Unm](), `{"status":1,"header":null,"body":null}`, true},
		{reflect.TypeFor[Unm](), `{"body":"AA==", "status":2}`, true}, // any form UnmarshalJSON takes
		{reflect.TypeFor[Unm](), `null`, true},                        // json calls UnmarshalJSON with null too
		{reflect.TypeFor[Unm](), ` {"status":1}`, false},
		{reflect.TypeFor[Unm](), `{"status":1}` + "\n", false},
		{reflect.TypeFor[Unm](), `{"status":1}{}`, false},
		{reflect.TypeFor[Unm](), `{"status":1`, false},
		{reflect.TypeFor[Unm](), `1`, false}, // UnmarshalJSON fails
		{reflect.TypeFor[Unm](), ``, false},
	} {
		got, ok := codecs[tc.typ].decode(Build(tc.typ), []byte(tc.data))
		if ok != tc.want {
			t.Errorf("Decode(%v, %s): %v, want %v", tc.typ, tc.data, ok, tc.want)
			continue
		}
		if tc.want {
			checkDecode(t, tc.typ, []byte(tc.data), true)
			if u, isUnm := got.Interface().(*Unm); isUnm && u.Raw != tc.data {
				t.Errorf("UnmarshalJSON got %q, want %q", u.Raw, tc.data)
			}
		}
	}
}

// TestEncodeMapAllocs: a small map[string][]string (http.Header) encodes
// with no allocation of its own.
func TestEncodeMapAllocs(t *testing.T) {
	p := Build(reflect.TypeFor[map[string][]string]())
	h := map[string][]string{"Content-Type": {"application/json"}, "X-Request-Id": {"1"}, "Vary": {"a", "b"}}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = Encode(p, buf[:0], &h) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// keeper breaks json.Unmarshaler's rule: it keeps the data it is given.
type keeper struct {
	N    int `json:"n"`
	kept []byte
}

func (k *keeper) UnmarshalJSON(b []byte) error {
	k.kept = b
	var v struct {
		N int `json:"n"`
	}
	err := json.Unmarshal(b, &v)
	k.N = v.N
	return err
}

// TestDecodeUnmarshalerGetsACopy: a type outside idem's stored types whose
// UnmarshalJSON keeps its data and changes it later must not change the
// bytes Decode was given (a memory store's own record).
func TestDecodeUnmarshalerGetsACopy(t *testing.T) {
	p := Build(reflect.TypeFor[keeper]())
	if p == nil {
		t.Fatal("keeper has no plan")
	}
	stored := []byte(`{"n":7}`)
	var k keeper
	if !Decode(p, stored, &k) || k.N != 7 {
		t.Fatalf("Decode: %+v", k)
	}
	for i := range k.kept {
		k.kept[i] = 'x'
	}
	if string(stored) != `{"n":7}` {
		t.Errorf("the stored bytes became %q through the decoded value", stored)
	}
}
