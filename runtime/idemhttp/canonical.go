package idemhttp

import (
	"net"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// A request's identity must not depend on how its client spelled the same
// thing: "API.example", "api.example:80" and "api.example." name one host,
// and "/a%5Fb", "/a_b" one path (RFC 3986, 6.2.2 and 6.2.3; RFC 9110,
// 4.2.3). canonicalHost and canonicalEscapes give each one spelling; the
// operation (for a route no pattern pins) and the fingerprint's target use
// them, the handler and a query still see the request as it was sent.

// canonicalHost returns host (a Host header: a name or an IP literal, and
// an optional port) lower-cased, its escaped unreserved characters
// decoded, without a trailing dot, without the port
// when it is the default of the request's scheme (443 with TLS, 80
// without), and an internationalised name as its A-label ("xn--…"). A host
// already in that form is returned as it is, without allocating.
func canonicalHost(host string, tls bool) string {
	if plainHost(host) {
		return host
	}
	name, port := host, ""
	if h, p, err := net.SplitHostPort(host); err == nil {
		name, port = h, p
		if strings.IndexByte(name, ':') >= 0 {
			name = "[" + name + "]" // an IPv6 literal keeps its brackets
		}
	} else if strings.HasSuffix(host, ":") {
		name = host[:len(host)-1] // an empty port is no port (RFC 3986, 6.2.3)
	}
	if (tls && port == "443") || (!tls && port == "80") {
		port = ""
	}
	if strings.IndexByte(name, '%') >= 0 {
		// A reg-name may escape its characters too (RFC 3986, 3.2.2):
		// "%61pi.example" is "api.example", and a name's UTF-8 may be
		// escaped, "b%C3%BCcher.example" is "bücher.example" (whose
		// A-label follows). Escapes that do not decode to a name's
		// characters stay, in one spelling.
		if d, ok := decodeRegName(name); ok {
			name = d
		} else {
			name = canonicalEscapes(name)
		}
	}
	name = strings.TrimSuffix(name, ".")
	if a, err := idna.Lookup.ToASCII(name); err == nil && a != "" {
		name = a // lower-cases too
	} else {
		name = strings.ToLower(name)
	}
	if port != "" {
		return name + ":" + port
	}
	return name
}

// plainHost reports whether host is lower-case ASCII letters, digits, '-'
// and inner dots, with a port other than 80 and 443 or none: the form
// canonicalHost gives, reached without parsing.
func plainHost(host string) bool {
	name, port, hasPort := strings.Cut(host, ":")
	if name == "" || name[len(name)-1] == '.' || (hasPort && (port == "" || port == "80" || port == "443")) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	if strings.HasPrefix(name, "xn--") || strings.Contains(name, ".xn--") {
		return false // an A-label: let idna check it is valid
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// decodeRegName returns the host name s (not an IP literal) with every
// escape decoded, when each '%' starts an escape and the result is UTF-8
// whose ASCII bytes a reg-name may hold (unreserved and sub-delims, RFC
// 3986, 3.2.2); ok is false otherwise.
func decodeRegName(s string) (string, bool) {
	if strings.HasPrefix(s, "[") {
		return "", false
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", false
			}
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		if c < utf8.RuneSelf && !unreserved(c) && strings.IndexByte("!$&'()*+,;=", c) < 0 {
			return "", false
		}
		b = append(b, c)
	}
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// canonicalPath returns an escaped path in one spelling (RFC 3986, 6.2.2
// and 6.2.3): each byte a path may not hold raw escaped (canonicalRaw),
// its escapes as canonicalEscapes gives them, its dot-segments removed
// (5.2.4; a "%2E" is a dot once decoded), and an empty path as "/", which
// is what an http URI with no path means.
func canonicalPath(p string) string {
	p = canonicalEscapes(canonicalRaw(p, false))
	if p == "" {
		return "/"
	}
	return removeDotSegments(p)
}

// canonicalTarget is canonicalPath for the path of a request target
// (path?query); the query keeps its spelling but for the bytes it may not
// hold raw, escaped, and its escapes.
func canonicalTarget(t string) string {
	path, query, ok := strings.Cut(t, "?")
	path = canonicalPath(path)
	if !ok {
		return path
	}
	return path + "?" + canonicalEscapes(canonicalRaw(query, true))
}

// canonicalRaw returns s, an escaped path (or, with query set, a query),
// with each byte it may not hold raw (RFC 3986, 3.3 and 3.4: a pchar,
// '/', and in a query '?') escaped as "%XX": a raw byte and its escape
// are one spelling ("[" is "%5B", "é" is "%C3%A9"), while the client's
// escapes stay as written ("%2F" is not "/"). A '%' that starts no escape
// is escaped too ("%25"). s itself when nothing needs escaping.
func canonicalRaw(s string, query bool) string {
	if query {
		return escapeBytes(s, rawQueryByte)
	}
	return escapeBytes(s, rawPchar)
}

// rawPchar reports whether s[i] may stay raw in a path in its one
// spelling: a pchar, '/', or the '%' of an escape.
func rawPchar(s string, i int) bool {
	switch c := s[i]; {
	case unreserved(c), strings.IndexByte("!$&'()*+,;=:@/", c) >= 0:
		return true
	case c == '%':
		return i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2])
	}
	return false
}

// rawQueryByte is rawPchar for a query, which may hold '?' raw too.
func rawQueryByte(s string, i int) bool { return s[i] == '?' || rawPchar(s, i) }

// removeDotSegments removes the "." and ".." segments of an absolute path
// (RFC 3986, 5.2.4): "/a/./b" is "/a/b", "/a/b/.." is "/a/", "/.." is "/".
// A path without a dot segment is returned as it is.
func removeDotSegments(p string) string {
	if p == "" || p[0] != '/' || !hasDotSegment(p) {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
			continue
		}
		if last {
			out = append(out, "") // "/a/." is "/a/"
		}
	}
	return "/" + strings.Join(out, "/")
}

// hasDotSegment reports whether the path p has a segment "." or "..".
func hasDotSegment(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		rest := p[i+1:]
		if rest == "." || rest == ".." || strings.HasPrefix(rest, "./") || strings.HasPrefix(rest, "../") {
			return true
		}
	}
	return false
}

// canonicalEscapes returns s (an escaped path or target) with each
// percent-encoded unreserved character (letters, digits, "-._~") decoded
// and the hex digits of every other escape upper-cased. s without '%' is
// returned as it is. A '%' that starts no valid escape is kept.
func canonicalEscapes(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c != '%' || i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			b.WriteByte(c)
			continue
		}
		d := unhex(s[i+1])<<4 | unhex(s[i+2])
		if unreserved(d) {
			b.WriteByte(d)
		} else {
			b.WriteByte('%')
			b.WriteByte(upper(s[i+1]))
			b.WriteByte(upper(s[i+2]))
		}
		i += 2
	}
	return b.String()
}

// escapeRaw returns the raw path p with each byte that may not appear raw
// in a path escaped as "%XX"; its escapes ('%' and two hex digits) and the
// bytes url.URL keeps raw in a path (unreserved, sub-delims, ':', '@', '/',
// '[', ']') stay as written. A '%' that starts no escape is escaped too
// ("%25"). p itself when nothing needs escaping.
func escapeRaw(p string) string { return escapeBytes(p, rawPathByte) }

// escapeBytes returns s with each byte keep refuses escaped as "%XX"; s
// itself when keep keeps every byte.
func escapeBytes(s string, keep func(s string, i int) bool) string {
	i := 0
	for ; i < len(s) && keep(s, i); i++ {
	}
	if i == len(s) {
		return s
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		if c := s[i]; keep(s, i) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

// rawPathByte reports whether p[i] may stay as it is in an escaped path.
func rawPathByte(p string, i int) bool {
	switch c := p[i]; {
	case unreserved(c), strings.IndexByte("!$&'()*+,;=:@/[]", c) >= 0:
		return true
	case c == '%':
		return i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2])
	}
	return false
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
