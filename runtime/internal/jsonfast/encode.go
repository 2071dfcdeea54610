package jsonfast

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// appendValue appends json.Marshal's encoding of the value n describes at p.
func appendValue(dst []byte, n *node, p unsafe.Pointer) []byte {
	switch n.kind {
	case kString:
		return appendString(dst, *(*string)(p))
	case kBool:
		if *(*bool)(p) {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case kInt8:
		return strconv.AppendInt(dst, int64(*(*int8)(p)), 10)
	case kInt16:
		return strconv.AppendInt(dst, int64(*(*int16)(p)), 10)
	case kInt32:
		return strconv.AppendInt(dst, int64(*(*int32)(p)), 10)
	case kInt64:
		return strconv.AppendInt(dst, *(*int64)(p), 10)
	case kUint8:
		return strconv.AppendUint(dst, uint64(*(*uint8)(p)), 10)
	case kUint16:
		return strconv.AppendUint(dst, uint64(*(*uint16)(p)), 10)
	case kUint32:
		return strconv.AppendUint(dst, uint64(*(*uint32)(p)), 10)
	case kUint64:
		return strconv.AppendUint(dst, *(*uint64)(p), 10)
	case kPointer:
		e := *(*unsafe.Pointer)(p)
		if e == nil {
			return append(dst, "null"...)
		}
		return appendValue(dst, n.elem, e)
	case kSlice:
		s := (*sliceHeader)(p)
		if s.data == nil {
			return append(dst, "null"...)
		}
		dst = append(dst, '[')
		for i := range s.len {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendValue(dst, n.elem, unsafe.Add(s.data, uintptr(i)*n.size))
		}
		return append(dst, ']')
	case kBytes:
		b := *(*[]byte)(p)
		if b == nil {
			return append(dst, "null"...)
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"')
	case kMap:
		return appendMap(dst, n, p)
	case kStruct:
		dst = append(dst, '{')
		first := true
		for i := range n.fields {
			f := &n.fields[i]
			fp := unsafe.Add(p, f.offset)
			if f.omitEmpty && empty(f.node, fp) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.key...)
			dst = appendValue(dst, f.node, fp)
		}
		return append(dst, '}')
	}
	panic("jsonfast: unknown kind " + strconv.Itoa(int(n.kind)))
}

// appendMap appends json.Marshal's encoding of the map n describes at p:
// null for nil, else an object with its keys in order (json sorts them as
// Go strings, before escaping).
func appendMap(dst []byte, n *node, p unsafe.Pointer) []byte {
	if *(*unsafe.Pointer)(p) == nil {
		return append(dst, "null"...)
	}
	var room [16]string // the keys of a small map, without an allocation
	switch n.shape {
	case mapStrings:
		return appendSorted(dst, *(*map[string][]string)(p), room[:0], appendStrings)
	case mapString:
		return appendSorted(dst, *(*map[string]string)(p), room[:0], appendString)
	}
	// Any other map: its keys and a copy of its values, by reflection.
	m := reflect.NewAt(n.typ, p).Elem()
	size := m.Len()
	keys := room[:0]
	vals := reflect.New(reflect.ArrayOf(size, n.typ.Elem())).Elem()
	kv := reflect.New(n.typ.Key()).Elem()
	var it reflect.MapIter
	it.Reset(m)
	for i := 0; it.Next(); i++ {
		kv.SetIterKey(&it)
		keys = append(keys, kv.String())
		vals.Index(i).SetIterValue(&it)
	}
	order := make([]int, size)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	base, esize := vals.Addr().UnsafePointer(), n.typ.Elem().Size()
	dst = append(dst, '{')
	for i, j := range order {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendString(dst, keys[j]), ':')
		dst = appendValue(dst, n.elem, unsafe.Add(base, uintptr(j)*esize))
	}
	return append(dst, '}')
}

// appendStrings appends json.Marshal's encoding of a []string (appendValue
// would take its address, moving it to the heap).
func appendStrings(dst []byte, s []string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, v := range s {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, v)
	}
	return append(dst, ']')
}

// appendSorted appends m as an object with its keys sorted, its values
// written by value; keys is where to sort them.
func appendSorted[V any](dst []byte, m map[string]V, keys []string, value func([]byte, V) []byte) []byte {
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendString(dst, k), ':')
		dst = value(dst, m[k])
	}
	return append(dst, '}')
}

const hex = "0123456789abcdef"

// appendString appends s as json.Marshal writes a string: quoted, with
// ", \ and control characters escaped, <, > and & escaped for HTML, U+2028
// and U+2029 escaped, and each byte of invalid UTF-8 written as \ufffd.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
