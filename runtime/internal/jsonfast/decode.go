package jsonfast

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"unicode/utf8"
	"unsafe"
)

// decoder reads the canonical encoding of a value: what appendValue
// writes, and nothing else.
type decoder struct {
	data []byte
	i    int
}

// value decodes the value n describes into p, which holds its zero value.
func (d *decoder) value(n *node, p unsafe.Pointer) bool {
	switch n.kind {
	case kString:
		s, ok := d.string()
		*(*string)(p) = s
		return ok
	case kBool:
		switch {
		case d.literal("true"):
			*(*bool)(p) = true
			return true
		case d.literal("false"):
			return true
		}
		return false
	case kInt8, kInt16, kInt32, kInt64:
		return d.int(n.kind, p)
	case kUint8, kUint16, kUint32, kUint64:
		return d.uint(n.kind, p)
	case kPointer:
		if d.literal("null") {
			return true // *p is nil already
		}
		e := reflect.New(n.typ).UnsafePointer()
		*(*unsafe.Pointer)(p) = e
		return d.value(n.elem, e)
	case kSlice:
		return d.slice(n, p)
	case kStruct:
		return d.object(n, p)
	case kBytes:
		return d.bytes(p)
	case kMap:
		return d.mapValue(n, p)
	}
	return false
}

// unmarshal calls u.UnmarshalJSON(data) where json.Unmarshal into u calls
// it with the same bytes: data is one valid value, with no space around it
// (json passes the value without the space). It reports whether it called
// it and it succeeded; on an error, json.Unmarshal says what it says.
func unmarshal(data []byte, u json.Unmarshaler) bool {
	if len(data) == 0 || space(data[0]) || space(data[len(data)-1]) || !json.Valid(data) {
		return false
	}
	return u.UnmarshalJSON(data) == nil
}

// space reports whether c is JSON's white space.
func space(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// strictBase64 is the encoding json writes, rejecting what it never
// writes (bits set past the last byte; line breaks are turned down before).
var strictBase64 = base64.StdEncoding.Strict()

// bytes decodes a []byte as json writes it: null, or its base64 in a
// string (json decodes more: escapes, line breaks, an array of numbers).
func (d *decoder) bytes(p unsafe.Pointer) bool {
	if d.literal("null") {
		return true // *p is nil already
	}
	if !d.byte('"') {
		return false
	}
	start := d.i
	for d.i < len(d.data) && base64Char(d.data[d.i]) {
		d.i++
	}
	enc := d.data[start:d.i]
	if !d.byte('"') {
		return false
	}
	b := make([]byte, strictBase64.DecodedLen(len(enc))) // as json: never nil
	n, err := strictBase64.Decode(b, enc)
	*(*[]byte)(p) = b[:n]
	return err == nil
}

// base64Char reports whether c is in base64.StdEncoding's alphabet or its
// padding.
func base64Char(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// mapValue decodes a map as appendMap writes it: null, or an object with
// its keys sorted, each once.
func (d *decoder) mapValue(n *node, p unsafe.Pointer) bool {
	if d.literal("null") {
		return true // *p is nil already
	}
	if !d.byte('{') {
		return false
	}
	var set func(k string) bool // decodes the value of k and stores it
	switch n.shape {
	case mapStrings:
		m := make(map[string][]string)
		*(*map[string][]string)(p) = m
		set = func(k string) bool {
			var v []string
			ok := d.value(n.elem, unsafe.Pointer(&v))
			m[k] = v
			return ok
		}
	case mapString:
		m := make(map[string]string)
		*(*map[string]string)(p) = m
		set = func(k string) bool {
			v, ok := d.string()
			m[k] = v
			return ok
		}
	default:
		// As json: each value decoded into a zero value, then stored.
		m := reflect.NewAt(n.typ, p).Elem()
		m.Set(reflect.MakeMap(n.typ))
		kv, ev := reflect.New(n.typ.Key()).Elem(), reflect.New(n.typ.Elem()).Elem()
		set = func(k string) bool {
			ev.SetZero()
			if !d.value(n.elem, ev.Addr().UnsafePointer()) {
				return false
			}
			kv.SetString(k)
			m.SetMapIndex(kv, ev)
			return true
		}
	}
	prev := ""
	for i := 0; !d.byte('}'); i++ {
		if i > 0 && !d.byte(',') {
			return false
		}
		k, ok := d.string()
		if !ok || i > 0 && k <= prev || !d.byte(':') || !set(k) {
			return false // a key out of order or twice: json decides
		}
		prev = k
	}
	return true
}

// literal consumes lit if it comes next.
func (d *decoder) literal(lit string) bool {
	if len(d.data)-d.i >= len(lit) && string(d.data[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// byte consumes c if it comes next.
func (d *decoder) byte(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *decoder) object(n *node, p unsafe.Pointer) bool {
	if !d.byte('{') {
		return false
	}
	first := true
	for i := range n.fields {
		f := &n.fields[i]
		at := d.i
		if !first && !d.byte(',') || !d.literal(f.key) {
			if !f.omitEmpty {
				return false
			}
			d.i = at // omitted
			continue
		}
		first = false
		fp := unsafe.Add(p, f.offset)
		if !d.value(f.node, fp) || f.omitEmpty && empty(f.node, fp) {
			return false // json writes no empty omitempty field
		}
	}
	return d.byte('}')
}

func (d *decoder) slice(n *node, p unsafe.Pointer) bool {
	if d.literal("null") {
		return true // *p is nil already
	}
	if !d.byte('[') {
		return false
	}
	// As json: a non-nil slice even when empty, grown one element at a time.
	s := reflect.NewAt(n.typ, p).Elem()
	s.Set(reflect.MakeSlice(n.typ, 0, 0))
	if d.byte(']') {
		return true
	}
	for i := 0; ; i++ {
		if i > 0 && !d.byte(',') {
			return false
		}
		if i == s.Cap() {
			s.Grow(1)
		}
		s.SetLen(i + 1)
		if !d.value(n.elem, s.Index(i).Addr().UnsafePointer()) {
			return false
		}
		if d.byte(']') {
			return true
		}
	}
}

// digits consumes the canonical digits of a number with no sign (0 or
// [1-9][0-9]*) and returns its value; ok is false on anything else or
// beyond math.MaxUint64.
func (d *decoder) digits() (v uint64, ok bool) {
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		if c < '0' || c > '9' {
			break
		}
		if v > (math.MaxUint64-uint64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		d.i++
	}
	switch {
	case d.i == start, d.data[start] == '0' && d.i > start+1:
		return 0, false // no digit, or a leading zero
	case d.i < len(d.data) && (d.data[d.i] == '.' || d.data[d.i] == 'e' || d.data[d.i] == 'E'):
		return 0, false // not an integer: json's error, from json
	}
	return v, true
}

func (d *decoder) int(k kind, p unsafe.Pointer) bool {
	neg := d.byte('-')
	u, ok := d.digits()
	if !ok || neg && u == 0 {
		return false // -0 is not what json writes
	}
	bits := uint(8) << (k - kInt8)
	limit := uint64(1) << (bits - 1) // |min| of the type; max is limit-1
	if !neg && u >= limit || neg && u > limit {
		return false // out of range: json's error, from json
	}
	v := int64(u)
	if neg {
		v = -v // for u == 1<<63: int64 wraps to math.MinInt64, as intended
	}
	switch k {
	case kInt8:
		*(*int8)(p) = int8(v)
	case kInt16:
		*(*int16)(p) = int16(v)
	case kInt32:
		*(*int32)(p) = int32(v)
	default:
		*(*int64)(p) = v
	}
	return true
}

func (d *decoder) uint(k kind, p unsafe.Pointer) bool {
	u, ok := d.digits()
	if !ok {
		return false
	}
	bits := uint(8) << (k - kUint8)
	if bits < 64 && u >= 1<<bits {
		return false
	}
	switch k {
	case kUint8:
		*(*uint8)(p) = uint8(u)
	case kUint16:
		*(*uint16)(p) = uint16(u)
	case kUint32:
		*(*uint32)(p) = uint32(u)
	default:
		*(*uint64)(p) = u
	}
	return true
}

// string decodes a string as appendString writes it.
func (d *decoder) string() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	// The common case: no escape, one allocation.
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			s := string(d.data[start:d.i])
			d.i++
			return s, true
		case c == '\\':
			return d.escaped(start)
		case c < utf8.RuneSelf:
			if !plain(c) {
				return "", false
			}
			d.i++
		default:
			size, ok := d.rune()
			if !ok {
				return "", false
			}
			d.i += size
		}
	}
	return "", false
}

// plain reports whether appendString writes the ASCII byte c as itself.
func plain(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// rune returns the size of the multi-byte rune at d.i, and false when it
// is not one appendString writes as itself (invalid UTF-8, U+2028,
// U+2029).
func (d *decoder) rune() (int, bool) {
	c, size := utf8.DecodeRune(d.data[d.i:])
	if c == utf8.RuneError && size == 1 || c == '\u2028' || c == '\u2029' {
		return 0, false
	}
	return size, true
}

// escaped decodes the rest of a string from the first escape at d.i; start
// is where the string's content began.
func (d *decoder) escaped(start int) (string, bool) {
	buf := make([]byte, 0, d.i-start+16)
	buf = append(buf, d.data[start:d.i]...)
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), true
		case c == '\\':
			r, ok := d.escape()
			if !ok {
				return "", false
			}
			buf = utf8.AppendRune(buf, r)
		case c < utf8.RuneSelf:
			if !plain(c) {
				return "", false
			}
			buf = append(buf, c)
			d.i++
		default:
			size, ok := d.rune()
			if !ok {
				return "", false
			}
			buf = append(buf, d.data[d.i:d.i+size]...)
			d.i += size
		}
	}
	return "", false
}

// escape decodes the escape at d.i if it is one appendString writes.
func (d *decoder) escape() (rune, bool) {
	if d.i+1 >= len(d.data) {
		return 0, false
	}
	switch c := d.data[d.i+1]; c {
	case '"', '\\':
		d.i += 2
		return rune(c), true
	case 'b':
		d.i += 2
		return '\b', true
	case 'f':
		d.i += 2
		return '\f', true
	case 'n':
		d.i += 2
		return '\n', true
	case 'r':
		d.i += 2
		return '\r', true
	case 't':
		d.i += 2
		return '\t', true
	case 'u':
	default:
		return 0, false
	}
	if d.i+6 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, h := range d.data[d.i+2 : d.i+6] {
		switch {
		case '0' <= h && h <= '9':
			r = r<<4 | rune(h-'0')
		case 'a' <= h && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		default:
			return 0, false // appendString writes lower case
		}
	}
	switch {
	case r < 0x20 && r != '\b' && r != '\f' && r != '\n' && r != '\r' && r != '\t',
		r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029', r == utf8.RuneError:
		d.i += 6
		return r, true
	}
	return 0, false
}
