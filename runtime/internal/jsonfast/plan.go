// Package jsonfast encodes and decodes a subset of Go types exactly as
// encoding/json does, without its reflection on every call: a [Plan],
// built once per type, lists what to write and read at which offset.
//
// The subset: strings, bools, integers of every size, byte slices (in
// base64), structs (without embedded fields) of these, pointers to them,
// slices of them and maps of them with keys of kind string (sorted as json
// sorts them). A type outside it, or one that json would treat specially
// (json.Number, a json.Marshaler, json.Unmarshaler, encoding.TextMarshaler
// or encoding.TextUnmarshaler on the value or its pointer, a field tagged
// ",string" or ",omitzero", a name two fields share, a recursive type), has
// no plan: the caller uses encoding/json. One exception: the type of the
// value itself may be a json.Unmarshaler (not a Marshaler), which Decode
// calls as json.Unmarshal would (see [Decode]).
//
// [Encode] writes the bytes json.Marshal writes (HTML-escaped). [Decode]
// accepts only those bytes: the canonical form for the type, fields in
// order, map keys sorted and once each, no whitespace, only the escapes
// json writes, base64 with its padding. Anything else is
// "not handled", and the caller decodes the same bytes with encoding/json;
// so whenever Decode accepts, its result is json.Unmarshal's.
package jsonfast

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unsafe"
)

// kind is what a plan node reads or writes.
type kind uint8

const (
	kString kind = iota
	kBool
	kInt8
	kInt16
	kInt32
	kInt64
	kUint8
	kUint16
	kUint32
	kUint64
	kStruct
	kPointer
	kSlice
	kBytes // a slice of bytes, in base64
	kMap   // a map with string keys
)

// Plan encodes and decodes values of one type. A nil *Plan means the type
// is not in the subset.
type Plan struct {
	typ  reflect.Type
	root *node
	// unmarshal: *T is a json.Unmarshaler, which Decode calls (root
	// encodes; it never decodes).
	unmarshal bool
	// own: T is one of idem's stored types, whose UnmarshalJSON copies
	// what it keeps (see ownPackage). Any other type's gets a copy of the
	// data: the data may be a store's own record (memstore keeps one copy),
	// and a method that keeps it against json.Unmarshaler's rule and
	// changes it later must not change the record.
	own bool
}

// node is the plan for one type.
type node struct {
	kind   kind
	typ    reflect.Type // kPointer: the element type; kSlice, kBytes, kMap: the slice or map type
	elem   *node        // kPointer, kSlice, kMap (the values)
	size   uintptr      // kSlice: the size of an element
	fields []field      // kStruct
	shape  mapShape     // kMap
}

// mapShape is a kMap whose Go type the encoder and decoder may use as it is,
// without reflection: one whose key and value types are identical to those
// of map[string][]string (http.Header) or map[string]string.
type mapShape uint8

const (
	mapAny mapShape = iota
	mapStrings
	mapString
)

// field is a struct field json encodes.
type field struct {
	key       string // `"name":`, escaped as json escapes it
	offset    uintptr
	omitEmpty bool
	node      *node
}

// Cache holds the plans built so far, by type. The zero value is ready to
// use; it is safe for concurrent use.
type Cache struct {
	// recent holds the first maxRecent types looked up: a service has a
	// few, and comparing them beats hashing a reflect.Type into m.
	recent atomic.Pointer[[]cached]
	m      sync.Map // reflect.Type -> *Plan (nil: not in the subset)
}

// maxRecent is how many types Cache.recent holds.
const maxRecent = 16

type cached struct {
	t reflect.Type
	p *Plan
}

// For returns the plan for T, or nil when T is not in the subset.
func For[T any](c *Cache) *Plan {
	t := reflect.TypeFor[T]()
	if r := c.recent.Load(); r != nil {
		for i := range *r {
			if (*r)[i].t == t {
				return (*r)[i].p
			}
		}
	}
	return c.lookup(t)
}

// lookup is For past c.recent: the plan from c.m (built on first use),
// added to c.recent while it has room.
func (c *Cache) lookup(t reflect.Type) *Plan {
	v, ok := c.m.Load(t)
	if !ok {
		v, _ = c.m.LoadOrStore(t, Build(t))
	}
	p := v.(*Plan)
	for {
		old := c.recent.Load()
		var r []cached
		if old != nil {
			if len(*old) >= maxRecent || slices.ContainsFunc(*old, func(e cached) bool { return e.t == t }) {
				return p
			}
			r = slices.Clip(*old)
		}
		r = append(r, cached{t, p}) // a new array: readers of old keep theirs
		if c.recent.CompareAndSwap(old, &r) {
			return p
		}
	}
}

// Build returns the plan for t, or nil when t is not in the subset.
//
// A type whose pointer is a json.Unmarshaler (and that json encodes by
// reflection: no json.Marshaler, no encoding.TextMarshaler) has a plan when
// its fields do: Encode writes its fields, Decode calls its UnmarshalJSON.
func Build(t reflect.Type) *Plan {
	if !Enabled {
		return nil
	}
	b := &builder{visiting: map[reflect.Type]bool{}, built: map[reflect.Type]*node{}}
	unmarshal := unmarshalsRoot(t)
	if unmarshal {
		b.root = t
	}
	n := b.build(t)
	if n == nil {
		return nil
	}
	return &Plan{typ: t, root: n, unmarshal: unmarshal, own: ownPackage(t.PkgPath())}
}

// unmarshalsRoot reports whether json.Unmarshal into a *t calls t's
// UnmarshalJSON with its whole input, whatever that is (null included),
// while json.Marshal encodes t by reflection. Not for a pointer or an
// interface, where json.Unmarshal sets a nil on null.
func unmarshalsRoot(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return false
	}
	return reflect.PointerTo(t).Implements(jsonUnmarshaler) && !marshals(t)
}

// ownPackage reports whether pkg is one of the packages whose stored
// types' UnmarshalJSON Decode trusts to copy what they keep (Plan.own):
// idemhttp's Response and idemgrpc's record, decoded on every replay.
func ownPackage(pkg string) bool {
	switch pkg {
	case "github.com/idemkit/idem/runtime/idemhttp", "github.com/idemkit/idem/runtime/idemgrpc":
		return true
	}
	return false
}

// Type is the type the plan encodes.
func (p *Plan) Type() reflect.Type { return p.typ }

// Encode appends to dst what json.Marshal(*v) returns. p must be the plan
// for T.
func Encode[T any](p *Plan, dst []byte, v *T) []byte {
	return appendValue(dst, p.root, unsafe.Pointer(v))
}

// Decode decodes data into *v, which must be T's zero value, and reports
// whether it did: false when data is not the canonical encoding of a T
// (then *v holds garbage the caller must discard). p must be the plan for
// T.
//
// For a T whose pointer is a json.Unmarshaler, Decode calls its UnmarshalJSON
// with data itself, as json.Unmarshal does, when data is one valid value
// with no space around it; it reports false for anything else, or when
// UnmarshalJSON fails.
func Decode[T any](p *Plan, data []byte, v *T) bool {
	if p.unmarshal {
		if !p.own {
			data = bytes.Clone(data)
		}
		return unmarshal(data, any(v).(json.Unmarshaler))
	}
	d := decoder{data: data}
	return d.value(p.root, unsafe.Pointer(v)) && d.i == len(data)
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	numberType      = reflect.TypeFor[json.Number]()
)

// special reports whether json treats t in a way of its own: json.Number,
// or a type with a method of t or of *t that json calls to encode or decode
// it.
func special(t reflect.Type) bool {
	return marshals(t) || implements(t, jsonUnmarshaler) || implements(t, textUnmarshaler)
}

// marshals reports whether json encodes t in a way of its own: json.Number,
// or a method of t or *t that json calls to encode it.
func marshals(t reflect.Type) bool {
	return t == numberType || implements(t, jsonMarshaler) || implements(t, textMarshaler)
}

// implements reports whether t or *t implements i.
func implements(t, i reflect.Type) bool {
	return t.Implements(i) || reflect.PointerTo(t).Implements(i)
}

// builder builds the nodes of one plan.
type builder struct {
	visiting map[reflect.Type]bool  // the types being built: one that holds itself is not in the subset
	built    map[reflect.Type]*node // the nodes built (nil: not in the subset), shared where a type recurs
	root     reflect.Type           // a root json.Unmarshaler (see unmarshalsRoot), else nil
}

// build returns the node for t, or nil when t is not in the subset.
func (b *builder) build(t reflect.Type) *node {
	if n, ok := b.built[t]; ok {
		return n
	}
	if b.visiting[t] {
		return nil
	}
	b.visiting[t] = true
	n := b.node(t)
	delete(b.visiting, t)
	b.built[t] = n
	return n
}

func (b *builder) node(t reflect.Type) *node {
	if t == b.root && marshals(t) || t != b.root && special(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		return &node{kind: kString}
	case reflect.Bool:
		return &node{kind: kBool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &node{kind: intKind(kInt8, t.Size())}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &node{kind: intKind(kUint8, t.Size())}
	case reflect.Pointer:
		if e := b.build(t.Elem()); e != nil {
			return &node{kind: kPointer, typ: t.Elem(), elem: e}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			// base64, unless the element has methods json calls: then an
			// array of what they write.
			if special(t.Elem()) {
				return nil
			}
			return &node{kind: kBytes, typ: t}
		}
		if e := b.build(t.Elem()); e != nil {
			return &node{kind: kSlice, typ: t, elem: e, size: t.Elem().Size()}
		}
	case reflect.Struct:
		return b.structNode(t)
	case reflect.Map:
		// Keys of kind string only, and without methods json calls: it
		// encodes a key of kind string as the string, but decodes one with
		// an UnmarshalText by that method.
		if t.Key().Kind() != reflect.String || special(t.Key()) {
			return nil
		}
		e := b.build(t.Elem())
		if e == nil {
			return nil
		}
		n := &node{kind: kMap, typ: t, elem: e}
		switch {
		case t.Key() == stringType && t.Elem() == stringsType:
			n.shape = mapStrings
		case t.Key() == stringType && t.Elem() == stringType:
			n.shape = mapString
		}
		return n
	}
	return nil
}

var (
	stringType  = reflect.TypeFor[string]()
	stringsType = reflect.TypeFor[[]string]()
)

// intKind returns the kind of an integer of size bytes, base kInt8 or
// kUint8.
func intKind(base kind, size uintptr) kind {
	switch size {
	case 1:
		return base
	case 2:
		return base + 1
	case 4:
		return base + 2
	}
	return base + 3
}

func (b *builder) structNode(t reflect.Type) *node {
	n := &node{kind: kStruct}
	names := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil // json's rules for embedded fields: not in the subset
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		omitEmpty := false
		for opts != "" {
			var opt string
			opt, opts, _ = strings.Cut(opts, ",")
			if opt != "omitempty" {
				return nil // string, omitzero, or an option a later json may give a meaning
			}
			omitEmpty = true
		}
		if !ValidTag(name) {
			name = sf.Name
		}
		if names[name] {
			return nil // json drops both fields
		}
		names[name] = true
		fn := b.build(sf.Type)
		if fn == nil {
			return nil
		}
		key := append(appendString(nil, name), ':')
		n.fields = append(n.fields, field{key: string(key), offset: sf.Offset, omitEmpty: omitEmpty, node: fn})
	}
	return n
}

// ValidTag is encoding/json's isValidTag: a tag name json uses, where any
// other falls back to the field's name.
func ValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

// empty reports whether json's omitempty omits the value n describes at p.
func empty(n *node, p unsafe.Pointer) bool {
	switch n.kind {
	case kString:
		return len(*(*string)(p)) == 0
	case kBool:
		return !*(*bool)(p)
	case kInt8, kUint8:
		return *(*uint8)(p) == 0
	case kInt16, kUint16:
		return *(*uint16)(p) == 0
	case kInt32, kUint32:
		return *(*uint32)(p) == 0
	case kInt64, kUint64:
		return *(*uint64)(p) == 0
	case kPointer:
		return *(*unsafe.Pointer)(p) == nil
	case kSlice, kBytes:
		return (*sliceHeader)(p).len == 0
	case kMap:
		return mapLen(n, p) == 0
	}
	return false // a struct is never empty
}

// mapLen returns the length of the map n describes at p.
func mapLen(n *node, p unsafe.Pointer) int {
	switch n.shape {
	case mapStrings:
		return len(*(*map[string][]string)(p))
	case mapString:
		return len(*(*map[string]string)(p))
	}
	return reflect.NewAt(n.typ, p).Elem().Len()
}

// sliceHeader is the runtime's layout of a slice.
type sliceHeader struct {
	data unsafe.Pointer
	len  int
	cap  int
}
