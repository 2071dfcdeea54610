package idemhttp

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/idemkit/idem/internal/rawvalue"
)

// storedHeader returns h with every value that is not UTF-8 (obs-text
// bytes) in the lossless stored form of rawvalue: h itself when all are.
func storedHeader(h http.Header) http.Header { return rawvalue.Encode(h) }

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

// parseStored reads b in the exact form encoding/json writes, with no escape
// in any string; ok is false for anything else (the caller then reads b
// the general way). The header's names and values share one copy of b.
func parseStored(b []byte) (resp Response, ok bool) {
	p := scan{b: b}
	if !p.lit(`{"status":`) {
		return resp, false
	}
	status, ok := p.int()
	if !ok || status < 200 || status > 999 || !p.lit(`,"header":`) {
		return resp, false
	}
	resp.Status = status
	if !p.lit("null") {
		if !p.lit("{") {
			return resp, false
		}
		// One string holds every name and value, and one []string every
		// header's values: two allocations however many headers there are.
		end, strs, ok := objectEnd(b, p.i)
		if !ok {
			return resp, false
		}
		p.s, p.base = string(b[p.i:end]), p.i
		values := make([]string, 0, strs) // room for them all, names counted too
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
			if k == "Content-Length" || k == "Transfer-Encoding" {
				// Framing, which the middleware never stores: a record
				// resolved by hand in this form. The general reader
				// drops it (net/http frames the body replayed).
				return resp, false
			}
			if _, dup := resp.Header[k]; dup {
				// A name twice, or in two cases: the general reader
				// decides (the last of a name wins there).
				return resp, false
			}
			if !p.lit("[") { // null among them: the general reader
				return resp, false
			}
			start := len(values)
			for firstV := true; !p.lit("]"); firstV = false {
				if !firstV && !p.lit(",") {
					return resp, false
				}
				v, ok := p.str()
				if !ok {
					return resp, false
				}
				values = append(values, v)
			}
			var vs []string // nil for [], as before
			if len(values) > start {
				// Capped: an append to one header's values copies them
				// rather than writing over the next header's.
				vs = values[start:len(values):len(values)]
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
// members start at b[i] and how many strings it holds, or false when a
// string in it has an escape.
func objectEnd(b []byte, i int) (end, strs int, ok bool) {
	depth, inStr := 0, false
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case inStr && c == '\\':
			return 0, 0, false
		case c == '"':
			if !inStr {
				strs++
			}
			inStr = !inStr
		case inStr:
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '}' && depth == 0:
			return i, strs, true
		}
	}
	return 0, 0, false
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
