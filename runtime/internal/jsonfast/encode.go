package jsonfast

import (
	"strconv"
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
