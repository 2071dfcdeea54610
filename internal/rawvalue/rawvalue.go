// Package rawvalue stores header and metadata values losslessly in JSON
// strings. A value that is not UTF-8 (HTTP obs-text bytes 0x80-0xFF, gRPC
// "-bin" metadata), or that starts with the marker, is stored as the marker
// (a NUL byte) and its bytes in base64; every other value as it is. A JSON
// string cannot carry bytes that are not UTF-8: encoding/json would turn
// them into U+FFFD.
package rawvalue

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// Mark starts a stored value that is in base64.
const Mark = "\x00"

// needs reports whether v must be stored in base64.
func needs(v string) bool { return strings.HasPrefix(v, Mark) || !utf8.ValidString(v) }

// Encode returns vals with every value in its stored form: vals itself when
// no value needs base64 (the common case), else a copy (nil stays nil).
func Encode(vals map[string][]string) map[string][]string {
	for _, vs := range vals {
		for _, v := range vs {
			if needs(v) {
				return encodeAll(vals)
			}
		}
	}
	return vals
}

func encodeAll(vals map[string][]string) map[string][]string {
	out := make(map[string][]string, len(vals))
	for k, vs := range vals {
		if vs == nil {
			out[k] = nil
			continue
		}
		cp := make([]string, len(vs))
		for i, v := range vs {
			cp[i] = v
			if needs(v) {
				cp[i] = Mark + base64.StdEncoding.EncodeToString([]byte(v))
			}
		}
		out[k] = cp
	}
	return out
}

// Decode reads one stored value.
func Decode(v string) string {
	if raw, ok := strings.CutPrefix(v, Mark); ok {
		if b, err := base64.StdEncoding.DecodeString(raw); err == nil {
			return string(b)
		}
	}
	return v
}

// DecodeAll decodes every value of vals in place.
func DecodeAll(vals map[string][]string) {
	for _, vs := range vals {
		for i, v := range vs {
			if strings.HasPrefix(v, Mark) {
				vs[i] = Decode(v)
			}
		}
	}
}
