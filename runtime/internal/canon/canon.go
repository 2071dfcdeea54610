// Package canon decides whether encoding/json's encoding of a value holds
// all of it, and writes a canonical encoding of every part of a value for
// the runtime's fingerprint when it does not.
//
// encoding/json leaves out unexported fields, fields tagged `json:"-"`,
// and fields of embedded structs that another field of the same JSON name
// shadows or that conflict with one at the same depth. Two requests that
// differ only there encode to the same JSON; a fingerprint of that JSON
// would replay one request's answer to the other. [Info] tells, per type,
// whether json's encoding covers every field (then the fingerprint stays
// the SHA-256 of the JSON); [Write] encodes all of a value, each field by
// its Go value, whatever its name or tag, and each value whose type has a
// MarshalJSON or MarshalText (as json would call it) by that method's
// bytes, so that time.Time and its kind are compared as json compares
// them, not by their internals.
package canon

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/idemkit/idem/runtime/internal/jsonfast"
)

// Prefix starts every canonical encoding: a JSON encoding never starts
// with it, so the two kinds of fingerprint never meet.
const Prefix = "idem/fingerprint/v2\x00"

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroer      = reflect.TypeFor[interface{ IsZero() bool }]()
	jsonNumber    = reflect.TypeFor[json.Number]()
)

// TypeInfo is what [Cache.Info] knows of a type.
type TypeInfo struct {
	// Covered: encoding/json's encoding of any value of the type holds
	// every field of every struct in it, as far as the type tells.
	Covered bool
	// Dynamic: whether json's encoding tells every two values apart
	// depends on the value ([ValueCovered]): the type holds interfaces
	// (json encodes their dynamic values), or parts json may encode alike
	// for values that differ (what omitempty or omitzero leave out, a nil
	// pointer beside a pointer to a nil, a nil embedded pointer beside
	// one to a struct whose fields are all left out). A value is covered
	// when it is the one of those that json's encoding stands for: nil,
	// not empty; 0, not -0; the zero value, not one a type's IsZero calls
	// zero.
	Dynamic bool
}

// Cache remembers [TypeInfo] by type. Its zero value is ready to use.
type Cache struct {
	// recent holds the first maxRecent request types [Cache.Info] was
	// asked about: a service has a few, and comparing them beats hashing
	// a reflect.Type into m on every call.
	recent atomic.Pointer[[]recentInfo]
	m      sync.Map // infoKey -> *typeEntry
	// promoted caches promotesMarshaler (reflect.Type -> bool).
	promoted sync.Map
}

type recentInfo struct {
	t  reflect.Type
	ti TypeInfo
}

const maxRecent = 16

type infoKey struct {
	t    reflect.Type
	addr bool
}

// Info returns what json's encoding of a value of t covers, t being
// encoded as json.Marshal encodes a value (not addressable: a
// MarshalJSON or MarshalText declared on *t is not called).
func (c *Cache) Info(t reflect.Type) TypeInfo {
	r := c.recent.Load()
	if r != nil {
		for i := range *r {
			if (*r)[i].t == t {
				return (*r)[i].ti
			}
		}
	}
	ti := c.info(t, false)
	for {
		var n []recentInfo
		if r != nil {
			if len(*r) >= maxRecent {
				return ti
			}
			n = append(n, *r...)
		}
		n = append(n, recentInfo{t, ti})
		if c.recent.CompareAndSwap(r, &n) {
			return ti
		}
		r = c.recent.Load()
		for i := range *r {
			if (*r)[i].t == t {
				return ti
			}
		}
	}
}

func (c *Cache) info(t reflect.Type, addr bool) TypeInfo { return c.entry(t, addr).ti }

// typeEntry is what the cache keeps of a type: its info and, for a
// Dynamic struct, what [Cache.ValueCovered] checks of each field.
type typeEntry struct {
	ti     TypeInfo
	fields []fieldCheck
}

// fieldCheck is a field of a Dynamic struct that ValueCovered looks at.
type fieldCheck struct {
	index int
	// omitEmpty, omitZero: its tag's omitempty or omitzero may leave out
	// values that differ.
	omitEmpty, omitZero bool
	embPtr              bool // an embedded pointer to a struct json may encode as nothing
	dynamic             bool // its type is Dynamic: ValueCovered goes into it
}

func (c *Cache) entry(t reflect.Type, addr bool) *typeEntry {
	k := infoKey{t, addr}
	if v, ok := c.m.Load(k); ok {
		return v.(*typeEntry)
	}
	w := walker{c: c, seen: map[infoKey]bool{}}
	e := &typeEntry{ti: w.info(t, addr)}
	if e.ti.Covered && e.ti.Dynamic && t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous {
				continue // not encoded: the type is not covered if it counts
			}
			tag := sf.Tag.Get("json")
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			fc := fieldCheck{index: i, embPtr: sf.Anonymous && !jsonfast.ValidTag(name) && mayVanish(ft),
				dynamic: c.info(ft, addr).Dynamic}
			fc.omitEmpty, fc.omitZero = omitsOthers(ft, opts)
			if fc.omitEmpty || fc.omitZero || fc.embPtr || fc.dynamic {
				e.fields = append(e.fields, fc)
			}
		}
	}
	c.m.Store(k, e)
	return e
}

// marshals reports whether json encodes a t (addressable or not) through
// a method of its own.
func marshals(t reflect.Type, addr bool) bool {
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) {
		return true
	}
	if addr && t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		pt := reflect.PointerTo(t)
		return pt.Implements(jsonMarshaler) || pt.Implements(textMarshaler)
	}
	return false
}

type walker struct {
	c    *Cache
	seen map[infoKey]bool // types being walked: a recursive type is as covered as the rest of it
}

// promotesMarshaler reports whether struct t gets the MarshalJSON or
// MarshalText json calls from a field it embeds while it has other fields:
// json then encodes the embedded field alone (a request embedding
// time.Time encodes as the time) and leaves the others out. A struct that
// declares the method itself is encoded by it, whatever it embeds.
func (c *Cache) promotesMarshaler(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || t.NumField() < 2 {
		return false
	}
	if v, ok := c.promoted.Load(t); ok {
		return v.(bool)
	}
	promoted := false
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && (marshals(f.Type, true) || f.Type.Kind() == reflect.Pointer && marshals(f.Type.Elem(), true)) {
			promoted = !declaresMarshaler(t)
			break
		}
	}
	c.promoted.Store(t, promoted)
	return promoted
}

// declaresMarshaler reports whether the method json calls on a t
// (MarshalJSON before MarshalText, on t or on *t) is t's own, not one
// promoted from a field it embeds. reflect does not say; the code of a
// promoted method is a wrapper the compiler makes, whose position is
// "<autogenerated>". When that cannot be told, false: the canonical
// encoding is then only more thorough (it compares every field).
func declaresMarshaler(t reflect.Type) bool {
	name := "MarshalText"
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		name = "MarshalJSON"
	}
	m, ok := t.MethodByName(name)
	if !ok {
		if m, ok = reflect.PointerTo(t).MethodByName(name); !ok {
			return false
		}
	}
	pc := m.Func.Pointer()
	f := goruntime.FuncForPC(pc)
	if f == nil {
		return false
	}
	file, _ := f.FileLine(pc)
	return file != "" && file != "<autogenerated>"
}

func (w *walker) info(t reflect.Type, addr bool) TypeInfo {
	if t == jsonNumber {
		return TypeInfo{Covered: true, Dynamic: true} // json writes "" as 0
	}
	if marshals(t, addr) {
		if w.c.promotesMarshaler(t) {
			return TypeInfo{} // the other fields are left out
		}
		return TypeInfo{Covered: true}
	}
	k := infoKey{t, addr}
	if w.seen[k] {
		return TypeInfo{Covered: true}
	}
	w.seen[k] = true
	defer delete(w.seen, k)
	switch t.Kind() {
	case reflect.Interface:
		return TypeInfo{Covered: true, Dynamic: true}
	case reflect.Pointer:
		ti := w.info(t.Elem(), true)
		if nullable(t.Elem()) {
			// A nil pointer and a pointer to a nil are both null.
			ti.Dynamic = true
		}
		return ti
	case reflect.Slice:
		return w.info(t.Elem(), true)
	case reflect.Array:
		return w.info(t.Elem(), addr)
	case reflect.Map:
		if k := t.Key(); k.Kind() != reflect.String && marshals(k, false) {
			// Keys json writes by their MarshalText: two may write
			// alike, and json then orders their entries at random.
			return TypeInfo{}
		}
		return w.info(t.Elem(), false)
	case reflect.Struct:
		return w.structInfo(t, addr)
	}
	// Scalars json encodes whole; chan, func, complex and unsafe.Pointer
	// make json.Marshal fail, so no fingerprint is taken of them.
	return TypeInfo{Covered: true}
}

// structInfo: every field must reach the encoding under a JSON name no
// other field has (json drops shadowed and conflicting fields).
func (w *walker) structInfo(t reflect.Type, addr bool) TypeInfo {
	ti := TypeInfo{Covered: true}
	names := map[string]bool{}
	var fields func(t reflect.Type, addr bool, depth int)
	fields = func(t reflect.Type, addr bool, depth int) {
		if depth > 32 { // json's own embedding depth is bounded by the types; this is a guard
			ti.Covered = false
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				ti.Covered = false
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if !jsonfast.ValidTag(name) {
				name = "" // json falls back to the field's name
			}
			ft, faddr := f.Type, addr
			if f.Anonymous && name == "" {
				if !f.IsExported() && ft.Kind() == reflect.Pointer {
					ti.Covered = false // json leaves out an unexported embedded pointer
					continue
				}
				et := ft
				if et.Kind() == reflect.Pointer {
					et, faddr = et.Elem(), true
				}
				if et.Kind() == reflect.Struct {
					// json promotes the embedded struct's fields, whatever
					// its methods: the struct itself marshals by fields
					// (Info checked), so a method of the embedded type is
					// not promoted (two at one depth are ambiguous, or it
					// needs an address the value does not have).
					if mayVanish(ft) {
						ti.Dynamic = true
					}
					fields(et, faddr, depth+1)
					continue
				}
				if !f.IsExported() {
					ti.Covered = false // an unexported embedded non-struct: left out
					continue
				}
			} else if !f.IsExported() {
				ti.Covered = false
				continue
			}
			if name == "" {
				name = f.Name
			}
			if names[name] {
				ti.Covered = false // shadowed or conflicting: json keeps at most one
			}
			names[name] = true
			if empty, zero := omitsOthers(ft, opts); empty || zero {
				ti.Dynamic = true
			}
			fi := w.info(ft, addr)
			ti.Covered = ti.Covered && fi.Covered
			ti.Dynamic = ti.Dynamic || fi.Dynamic
		}
	}
	fields(t, addr, 0)
	return ti
}

// nullable reports whether json encodes some values of t (not the nil of
// a pointer to t) as null.
func nullable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return true // nil is null, whatever the methods
	case reflect.Slice, reflect.Map:
		// json calls a method on a nil slice or map (its answer is
		// trusted); one on the pointer type may not be called: counted
		// as null.
		return !t.Implements(jsonMarshaler) && !t.Implements(textMarshaler)
	}
	return false
}

// hasOpt reports whether a json tag's options (after the name) list opt.
func hasOpt(opts, opt string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == opt {
			return true
		}
	}
	return false
}

// omitsOthers reports whether the omitempty (empty) or the omitzero (zero)
// among a field's json tag options opts may leave out, for a field of type
// t, two values that differ: under omitempty, a nil and an empty slice or
// map, 0 and -0; under omitzero, -0 (reflect's IsZero holds it zero) or any
// value a type's own IsZero calls zero. (omitempty leaves out one value of
// every other kind: false, 0, "", nil, a zero-length array.)
func omitsOthers(t reflect.Type, opts string) (empty, zero bool) {
	if hasOpt(opts, "omitempty") {
		switch t.Kind() {
		case reflect.Slice, reflect.Map, reflect.Float32, reflect.Float64:
			empty = true
		}
	}
	if hasOpt(opts, "omitzero") {
		zero = zeroHidesFloats(t) || t.Implements(isZeroer) || reflect.PointerTo(t).Implements(isZeroer)
	}
	return empty, zero
}

// mayVanish reports whether an embedded field of type t may encode as
// nothing for two values that differ: a nil pointer to a struct, and a
// pointer to one whose fields are all left out.
func mayVanish(t reflect.Type) bool {
	return t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !alwaysEncodesAField(t.Elem())
}

// zeroHidesFloats reports whether reflect's IsZero may hold a value of t
// zero that holds -0.
func zeroHidesFloats(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return t.Len() > 0 && zeroHidesFloats(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if zeroHidesFloats(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// alwaysEncodesAField reports whether json encodes at least one field of
// every value of struct t: a field of its own, exported, not "-" and
// never omitted. (A promoted field counts not: it may be shadowed.)
func alwaysEncodesAField(t reflect.Type) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		_, opts, _ := strings.Cut(tag, ",")
		if f.IsExported() && !f.Anonymous && tag != "-" && !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			return true
		}
	}
	return false
}

// ValueCovered reports whether json's encoding of v (a value of a type
// whose info is Covered and Dynamic) tells it apart from every other
// value: whether every dynamic value of an interface in it is of a
// covered type and holds no null but the interface's own, and every part
// that json may encode alike for values that differ is the one value the
// encoding stands for (see [TypeInfo]).
func (c *Cache) ValueCovered(v reflect.Value) bool { return c.valueCovered(v, false, 0) }

func (c *Cache) valueCovered(v reflect.Value, addr bool, depth int) bool {
	if depth > 1000 { // json.Marshal fails on deeper values (cycles) first
		return false
	}
	t := v.Type()
	e := c.entry(t, addr)
	if !e.ti.Covered {
		return false
	}
	if !e.ti.Dynamic {
		return true
	}
	if t == jsonNumber {
		return v.String() != "" // "" is written as 0
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return true
		}
		if el := v.Elem(); nullable(el.Type()) && el.IsNil() {
			return false // null, as the nil interface is
		}
		return c.valueCovered(v.Elem(), false, depth+1)
	case reflect.Pointer:
		if v.IsNil() {
			return true
		}
		if el := v.Elem(); nullable(el.Type()) && el.IsNil() {
			return false // null, as the nil pointer is
		}
		return c.valueCovered(v.Elem(), true, depth+1)
	case reflect.Slice, reflect.Array:
		ea := addr || v.Kind() == reflect.Slice
		for i := range v.Len() {
			if !c.valueCovered(v.Index(i), ea, depth+1) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !c.valueCovered(it.Value(), false, depth+1) {
				return false
			}
		}
	case reflect.Struct:
		for _, fc := range e.fields {
			f := v.Field(fc.index)
			if fc.embPtr && !f.IsNil() {
				// A nil embedded pointer stands for itself; a pointer to
				// a struct json may encode as nothing is not told apart
				// from it.
				return false
			}
			if (fc.omitEmpty || fc.omitZero) && !omittedValueCovered(f, fc.omitEmpty, fc.omitZero) {
				return false
			}
			if fc.dynamic && !c.valueCovered(f, addr, depth+1) {
				return false
			}
		}
	}
	return true
}

// omittedValueCovered reports whether field f, whose omitempty or
// omitzero may leave out values that differ, is, when left out, the value
// json's encoding stands for.
func omittedValueCovered(f reflect.Value, omitEmpty, omitZero bool) bool {
	if omitEmpty {
		switch f.Kind() {
		case reflect.Slice, reflect.Map:
			if !f.IsNil() && f.Len() == 0 {
				return false // empty, left out as nil is
			}
		case reflect.Float32, reflect.Float64:
			if fl := f.Float(); fl == 0 && math.Signbit(fl) {
				return false // -0, left out as 0 is
			}
		}
	}
	if omitZero && isZero(f) {
		// Left out: it must be the zero value itself, bit for bit.
		return bitwiseZero(f)
	}
	return true
}

// isZero reports whether json's omitzero leaves f out: by the type's own
// IsZero when it has one, else by reflect's.
func isZero(f reflect.Value) bool {
	t := f.Type()
	switch {
	case !f.CanInterface():
		return f.IsZero()
	case t.Kind() == reflect.Interface && t.Implements(isZeroer):
		// As json: no IsZero called on a nil interface or a nil pointer.
		return f.IsNil() || (f.Elem().Kind() == reflect.Pointer && f.Elem().IsNil()) ||
			f.Interface().(interface{ IsZero() bool }).IsZero()
	case t.Kind() == reflect.Pointer && t.Implements(isZeroer):
		return f.IsNil() || f.Interface().(interface{ IsZero() bool }).IsZero()
	case t.Implements(isZeroer):
		return f.Interface().(interface{ IsZero() bool }).IsZero()
	case reflect.PointerTo(t).Implements(isZeroer):
		c := reflect.New(t) // json calls it only on an addressable value: a copy tells the same
		c.Elem().Set(f)
		return c.Interface().(interface{ IsZero() bool }).IsZero()
	}
	return f.IsZero()
}

// bitwiseZero reports whether f is its type's zero value with no -0 in it.
func bitwiseZero(f reflect.Value) bool {
	if !f.IsZero() {
		return false
	}
	switch f.Kind() {
	case reflect.Float32, reflect.Float64:
		return !math.Signbit(f.Float())
	case reflect.Complex64, reflect.Complex128:
		c := f.Complex()
		return !math.Signbit(real(c)) && !math.Signbit(imag(c))
	case reflect.Array:
		for i := range f.Len() {
			if !bitwiseZero(f.Index(i)) {
				return false
			}
		}
	case reflect.Struct:
		for i := range f.NumField() {
			if !bitwiseZero(f.Field(i)) {
				return false
			}
		}
	}
	return true
}

// ErrNotComparable: a value holds a part no fingerprint can compare (a
// func, a chan or an unsafe.Pointer that is not nil, or a cycle of
// pointers), where json's encoding does not reach it.
var ErrNotComparable = errors.New("cannot be compared by value")

// Limits of one canonical encoding: a request past them is refused with
// [ErrNotComparable] rather than walked for minutes (a graph whose nodes
// share parts through unexported pointers is walked once per path) or
// past the stack (a very long list).
const (
	maxParts = 1 << 20
	maxDepth = 100_000
)

// Write writes the canonical encoding of v (after [Prefix]) to h. v is
// encoded as json.Marshal would see it: MarshalJSON and MarshalText
// declared on a pointer type are called where json calls them (on
// addressable values: behind pointers, in slices); a MarshalJSON's output
// is taken as json writes it (compacted, HTML-escaped); a value in an
// interface whose JSON tells it apart ([Cache.ValueCovered]) is written
// as its JSON, as it is when the whole request's JSON does.
func (c *Cache) Write(h hash.Hash, v reflect.Value) error {
	_, _ = h.Write([]byte(Prefix))
	e := encoder{h: h, path: map[ref]bool{}, c: c, budget: new(int)}
	// An addressable copy, so that unexported fields can be read whole
	// (their marshalers called) wherever they are.
	cp := reflect.New(v.Type()).Elem()
	cp.Set(v)
	return e.value(cp, false, nil)
}

type encoder struct {
	h      hash.Hash
	buf    [16]byte
	path   map[ref]bool // pointers being followed: a cycle is refused
	c      *Cache
	budget *int // parts written so far, shared with the encoders of map keys and values
	depth  int
}

// sub returns an encoder writing to h that shares e's path and budget.
func (e *encoder) sub(h hash.Hash) *encoder {
	return &encoder{h: h, path: e.path, c: e.c, budget: e.budget, depth: e.depth}
}

// ref is a pointer being followed, with its type: a struct and its first
// field share an address.
type ref struct {
	p unsafe.Pointer
	t reflect.Type
}

// step is where a value is in the request, for errors: built on the way
// down, rendered only when one is returned.
type step struct {
	up    *step
	field string // a field's name, or "" for an index
	index int    // -1 for a map's value
}

func (s *step) String() string {
	if s == nil {
		return "the request"
	}
	var parts []string
	for ; s != nil; s = s.up {
		switch {
		case s.field != "":
			parts = append(parts, "."+s.field)
		case s.index < 0:
			parts = append(parts, "[…]")
		default:
			parts = append(parts, fmt.Sprintf("[%d]", s.index))
		}
	}
	slices.Reverse(parts)
	return "field " + strings.TrimPrefix(strings.Join(parts, ""), ".")
}

func (e *encoder) tag(b byte) { e.buf[0] = b; _, _ = e.h.Write(e.buf[:1]) }
func (e *encoder) u64(b byte, u uint64) {
	e.buf[0] = b
	binary.BigEndian.PutUint64(e.buf[1:9], u)
	_, _ = e.h.Write(e.buf[:9])
}
func (e *encoder) bytes(b byte, p []byte) {
	e.u64(b, uint64(len(p)))
	_, _ = e.h.Write(p)
}

// readable returns v with its read-only mark cleared when v is addressable
// (a field reached through unexported fields), so that its methods can be
// called; the fingerprint only reads it.
func readable(v reflect.Value) reflect.Value {
	if v.CanInterface() || !v.CanAddr() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// owned returns an addressable copy of v when v is a struct or an array
// that is not addressable (a map's value, an interface's): its fields can
// then be read whole.
func owned(v reflect.Value) reflect.Value {
	if v.CanAddr() || !v.CanInterface() || (v.Kind() != reflect.Struct && v.Kind() != reflect.Array) {
		return v
	}
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	return c
}

func (e *encoder) value(v reflect.Value, addr bool, at *step) error {
	if *e.budget++; *e.budget > maxParts {
		return fmt.Errorf("%s: more than %d parts to compare (parts shared through pointers count once per path) %w; set the call's Fingerprint",
			at, maxParts, ErrNotComparable)
	}
	if e.depth++; e.depth > maxDepth {
		return fmt.Errorf("%s: nested more than %d deep %w; set the call's Fingerprint", at, maxDepth, ErrNotComparable)
	}
	defer func() { e.depth-- }()
	v = readable(v)
	t := v.Type()
	if v.Kind() != reflect.Interface && v.CanInterface() {
		if done, err := e.marshal(v, addr, at); done || err != nil {
			return err
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		var b uint64
		if v.Bool() {
			b = 1
		}
		e.u64('b', b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.u64('i', uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.u64('u', v.Uint())
	case reflect.Float32, reflect.Float64:
		e.u64('f', math.Float64bits(v.Float()))
	case reflect.Complex64, reflect.Complex128:
		c := v.Complex()
		e.u64('c', math.Float64bits(real(c)))
		e.u64('c', math.Float64bits(imag(c)))
	case reflect.String:
		e.bytes('s', []byte(v.String()))
	case reflect.Interface:
		if v.IsNil() {
			e.tag('n')
			return nil
		}
		el := v.Elem()
		if el.CanInterface() && e.c.ValueCovered(el) {
			// Its JSON tells it apart: compared by it, as the JSON of a
			// request holding it is (an int 1 and a float64 1 alike).
			b, err := json.Marshal(el.Interface())
			if err != nil {
				return fmt.Errorf("%s (%s): %w", at, el.Type(), err)
			}
			if !LossyUTF8(b) {
				e.bytes('j', b)
				return nil
			}
		}
		e.bytes('I', []byte(typeName(el.Type())))
		return e.value(owned(el), false, at)
	case reflect.Pointer:
		if v.IsNil() {
			e.tag('n')
			return nil
		}
		p := ref{v.UnsafePointer(), t}
		if e.path[p] {
			return fmt.Errorf("%s (%s): a cycle of pointers %w", at, t, ErrNotComparable)
		}
		e.path[p] = true
		defer delete(e.path, p)
		e.tag('p')
		return e.value(v.Elem(), true, at)
	case reflect.Slice:
		if v.IsNil() {
			e.tag('n')
			return nil
		}
		if t.Elem().Kind() == reflect.Uint8 && !marshals(t.Elem(), true) {
			e.bytes('B', v.Bytes())
			return nil
		}
		p := ref{v.UnsafePointer(), t}
		if v.Len() > 0 && e.path[p] {
			return fmt.Errorf("%s (%s): a cycle through a slice %w", at, t, ErrNotComparable)
		}
		if v.Len() > 0 {
			e.path[p] = true
			defer delete(e.path, p)
		}
		e.u64('l', uint64(v.Len()))
		for i := range v.Len() {
			if err := e.value(v.Index(i), true, &step{up: at, index: i}); err != nil {
				return err
			}
		}
	case reflect.Array:
		e.u64('a', uint64(v.Len()))
		for i := range v.Len() {
			if err := e.value(v.Index(i), addr, &step{up: at, index: i}); err != nil {
				return err
			}
		}
	case reflect.Map:
		return e.mapValue(v, at)
	case reflect.Struct:
		e.u64('S', uint64(v.NumField()))
		for i := range v.NumField() {
			if err := e.value(v.Field(i), addr, &step{up: at, field: t.Field(i).Name}); err != nil {
				return err
			}
		}
	default: // chan, func, unsafe.Pointer
		if v.IsNil() {
			e.tag('n')
			return nil
		}
		return fmt.Errorf("%s (%s): a %s %w; set the call's Fingerprint, or keep it out of the request type", at, t, v.Kind(), ErrNotComparable)
	}
	return nil
}

// marshal encodes v by its MarshalJSON or MarshalText when json would.
func (e *encoder) marshal(v reflect.Value, addr bool, at *step) (bool, error) {
	t := v.Type()
	if e.c.promotesMarshaler(t) {
		return false, nil // every field, not the embedded one's method alone
	}
	var m reflect.Value
	switch {
	case t.Implements(jsonMarshaler) || t.Implements(textMarshaler):
		m = v
	case addr && v.CanAddr() && t.Kind() != reflect.Pointer && marshals(t, true):
		m = v.Addr()
	default:
		return false, nil
	}
	if m.Kind() == reflect.Pointer && m.IsNil() {
		e.tag('n')
		return true, nil
	}
	if jm, ok := m.Interface().(json.Marshaler); ok {
		b, err := jm.MarshalJSON()
		if err != nil {
			return true, fmt.Errorf("%s (%s): MarshalJSON: %w", at, t, err)
		}
		// As json writes it: compacted, HTML-escaped (json.Marshal fails
		// on output that is not JSON).
		var compact, escaped bytes.Buffer
		if err := json.Compact(&compact, b); err != nil {
			return true, fmt.Errorf("%s (%s): MarshalJSON: %w", at, t, err)
		}
		json.HTMLEscape(&escaped, compact.Bytes())
		e.bytes('J', escaped.Bytes())
		return true, nil
	}
	b, err := m.Interface().(encoding.TextMarshaler).MarshalText()
	if err != nil {
		return true, fmt.Errorf("%s (%s): MarshalText: %w", at, t, err)
	}
	e.bytes('T', b)
	return true, nil
}

// mapValue encodes a map's entries in the order of their keys' encodings,
// then of their values' (two keys a lossy MarshalText encodes alike are
// still written in one order). A key of string kind is its string, as
// json takes it, whatever its methods.
func (e *encoder) mapValue(v reflect.Value, at *step) error {
	if v.IsNil() {
		e.tag('n')
		return nil
	}
	t := v.Type()
	p := ref{v.UnsafePointer(), t}
	if e.path[p] {
		return fmt.Errorf("%s (%s): a cycle through a map %w", at, t, ErrNotComparable)
	}
	e.path[p] = true
	defer delete(e.path, p)
	type entry struct{ key, val []byte }
	entries := make([]entry, 0, v.Len())
	stringKeys := t.Key().Kind() == reflect.String
	for it := v.MapRange(); it.Next(); {
		var en entry
		if stringKeys {
			kh := &collect{}
			e.sub(kh).bytes('s', []byte(it.Key().String()))
			en.key = kh.b
		} else {
			kh := &collect{}
			if err := e.sub(kh).value(owned(it.Key()), false, &step{up: at, index: -1}); err != nil {
				return err
			}
			en.key = kh.b
		}
		vh := &collect{}
		if err := e.sub(vh).value(owned(it.Value()), false, &step{up: at, index: -1}); err != nil {
			return err
		}
		en.val = vh.b
		entries = append(entries, en)
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := strings.Compare(string(a.key), string(b.key)); c != 0 {
			return c
		}
		return strings.Compare(string(a.val), string(b.val))
	})
	e.u64('m', uint64(len(entries)))
	for _, en := range entries {
		_, _ = e.h.Write(en.key)
		_, _ = e.h.Write(en.val)
	}
	return nil
}

// collect is a hash.Hash that keeps what is written (a map key's
// encoding, to sort by).
type collect struct{ b []byte }

func (c *collect) Write(p []byte) (int, error) { c.b = append(c.b, p...); return len(p), nil }
func (c *collect) Sum(b []byte) []byte         { return append(b, c.b...) }
func (c *collect) Reset()                      { c.b = c.b[:0] }
func (c *collect) Size() int                   { return len(c.b) }
func (c *collect) BlockSize() int              { return 1 }

// LossyUTF8 reports whether a JSON encoding may hold a string with invalid
// UTF-8: json writes each invalid byte as \ufffd (a valid U+FFFD is
// written as itself), so that "\xff" and "\xfe" encode alike. (A
// MarshalJSON that writes the escape itself costs only the canonical
// encoding.)
func LossyUTF8(b []byte) bool { return bytes.Contains(b, []byte(`\ufffd`)) }

// typeName names a dynamic type with its package path, so that two types
// of one name in two packages differ.
func typeName(t reflect.Type) string {
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return t.String()
}
