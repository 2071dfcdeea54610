package idemhttp

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
)

// A Response is stored with the runtime's codec, JSON by default, in the
// form encoding/json gives its fields:
//
//	{"status":201,"header":{"Content-Type":["application/json"]},"body":"eyJ...","streamed":true}
//
// (header names sorted, "streamed" only when true). MarshalJSON writes
// exactly those bytes without reflection, and UnmarshalJSON reads that form
// in one pass, falling back to the general reader (unmarshalAny) for any
// other form: a record stored by an earlier version with escapes in its
// strings, or one resolved by hand. The stored format is unchanged, so
// records written before and after read alike, by either version.

// MarshalJSON implements [json.Marshaler]: the stored form of r, byte for
// byte what encoding/json writes for the struct.
func (r Response) MarshalJSON() ([]byte, error) {
	n := 48 + base64.StdEncoding.EncodedLen(len(r.Body))
	for k, vs := range r.Header {
		n += len(k) + 6
		for _, v := range vs {
			n += len(v) + 3
		}
	}
	b := make([]byte, 0, n)
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"header":`...)
	if r.Header == nil {
		b = append(b, "null"...)
	} else {
		var arr [16]string
		keys := arr[:0]
		for k := range r.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			b = appendString(appendComma(b, i), k)
			b = append(b, ':')
			vs := r.Header[k]
			if vs == nil {
				b = append(b, "null"...)
				continue
			}
			b = append(b, '[')
			for j, v := range vs {
				b = appendString(appendComma(b, j), v)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `,"body":`...)
	if r.Body == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, r.Body)
		b = append(b, '"')
	}
	if r.Streamed {
		b = append(b, `,"streamed":true`...)
	}
	return append(b, '}'), nil
}

// appendComma appends the comma before the element i of a list.
func appendComma(b []byte, i int) []byte {
	if i > 0 {
		return append(b, ',')
	}
	return b
}

// plain reports whether encoding/json writes c as it is inside a string:
// printable ASCII but the quote, the backslash and the HTML characters it
// escapes.
func plain(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// appendString appends s as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// UnmarshalJSON reads a Response in its stored form or in the documented
// form of a record resolved by hand (`idemctl resolve -to success`):
//
//	{"status": 201, "headers": {"Content-Type": "application/json"}, "body": {"charge": "ch_1"}}
//
// "header" or "headers" maps names to a value or a list of values; "body"
// is the body's bytes in base64 when it is a string (the stored form) and
// the JSON body itself otherwise (an object, an array, a number, true,
// false); "body_text" is a text body as it is.
func (r *Response) UnmarshalJSON(b []byte) error {
	if resp, ok := parseStored(b); ok {
		*r = resp
		return nil
	}
	return r.unmarshalAny(b)
}

// parseStored reads b in the exact form MarshalJSON writes, with no escape
// in any string; ok is false for anything else (the caller then reads b
// the general way). The header's names and values share one copy of b.
func parseStored(b []byte) (resp Response, ok bool) {
	p := scan{b: b}
	if !p.lit(`{"status":`) {
		return resp, false
	}
	status, ok := p.int()
	if !ok || status < 100 || status > 999 || !p.lit(`,"header":`) {
		return resp, false
	}
	resp.Status = status
	if !p.lit("null") {
		if !p.lit("{") {
			return resp, false
		}
		// One string holds every name and value: one allocation however
		// many headers there are.
		end, ok := objectEnd(b, p.i)
		if !ok {
			return resp, false
		}
		p.s, p.base = string(b[p.i:end]), p.i
		resp.Header = make(http.Header, 4)
		for first := true; !p.lit("}"); first = false {
			if !first && !p.lit(",") {
				return resp, false
			}
			k, ok := p.str()
			if !ok || !p.lit(":") {
				return resp, false
			}
			k = http.CanonicalHeaderKey(k)
			if _, dup := resp.Header[k]; dup {
				// A name twice, or in two cases: the general reader
				// decides (the last of a name wins there).
				return resp, false
			}
			if !p.lit("[") { // null among them: the general reader
				return resp, false
			}
			var vs []string
			for firstV := true; !p.lit("]"); firstV = false {
				if !firstV && !p.lit(",") {
					return resp, false
				}
				v, ok := p.str()
				if !ok {
					return resp, false
				}
				vs = append(vs, v)
			}
			resp.Header[k] = vs
		}
	}
	if !p.lit(`,"body":`) {
		return resp, false
	}
	if !p.lit("null") {
		if !p.lit(`"`) {
			return resp, false
		}
		start := p.i
		for p.i < len(b) && b[p.i] != '"' {
			p.i++
		}
		enc := b[start:p.i]
		if !p.lit(`"`) {
			return resp, false
		}
		body := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		n, err := base64.StdEncoding.Decode(body, enc)
		if err != nil {
			return resp, false
		}
		resp.Body = body[:n]
	}
	if p.lit(`,"streamed":true`) {
		resp.Streamed = true
	}
	return resp, p.lit("}") && p.i == len(b)
}

// objectEnd returns the index of the "}" that closes the object whose
// members start at b[i], or false when a string in it has an escape.
func objectEnd(b []byte, i int) (int, bool) {
	depth, inStr := 0, false
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case inStr && c == '\\':
			return 0, false
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '}' && depth == 0:
			return i, true
		}
	}
	return 0, false
}

// scan reads the stored form: b is the record, s a string copy of b from
// base on (the header object), where str takes its strings from.
type scan struct {
	b    []byte
	i    int
	s    string
	base int
}

func (p *scan) lit(l string) bool {
	if len(p.b)-p.i >= len(l) && string(p.b[p.i:p.i+len(l)]) == l {
		p.i += len(l)
		return true
	}
	return false
}

func (p *scan) int() (int, bool) {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' && p.i-start < 4 {
		p.i++
	}
	n, err := strconv.Atoi(string(p.b[start:p.i]))
	return n, err == nil
}

// str reads a string inside the header object: printable ASCII without
// escapes (anything else is left to the general reader, which replaces
// invalid UTF-8 as encoding/json does).
func (p *scan) str() (string, bool) {
	if !p.lit(`"`) {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) && p.b[p.i] != '"' {
		if c := p.b[p.i]; c == '\\' || c < 0x20 || c >= 0x7f {
			return "", false
		}
		p.i++
	}
	if p.i == len(p.b) || start < p.base || p.i-p.base > len(p.s) {
		return "", false
	}
	v := p.s[start-p.base : p.i-p.base]
	p.i++
	return v, true
}
