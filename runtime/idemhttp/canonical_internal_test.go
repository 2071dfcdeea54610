package idemhttp

import (
	"net/url"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		host string
		tls  bool
		want string
	}{
		{"api.example", false, "api.example"},
		{"API.Example", false, "api.example"},
		{"api.example.", false, "api.example"},
		{"api.example:80", false, "api.example"},
		{"api.example:80", true, "api.example:80"},
		{"api.example:443", true, "api.example"},
		{"api.example:443", false, "api.example:443"},
		{"api.example:", false, "api.example"},
		{"api.example:8080", false, "api.example:8080"},
		{"Bücher.example", false, "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", false, "xn--bcher-kva.example"},
		{"XN--BCHER-KVA.example.:80", false, "xn--bcher-kva.example"},
		{"[::1]:80", false, "[::1]"},
		{"[::1]:8080", false, "[::1]:8080"},
		{"[::1]", false, "[::1]"},
		{"127.0.0.1:80", false, "127.0.0.1"},
		{"b%C3%BCcher.example", false, "xn--bcher-kva.example"}, // a reg-name's UTF-8, escaped (RFC 3986, 3.2.2)
		{"B%c3%bcCHER.example.:80", false, "xn--bcher-kva.example"},
		{"%FF.example", false, "%ff.example"}, // not UTF-8 once decoded: the escapes stay (a name is lower-cased)
		{"%ff.EXAMPLE", false, "%ff.example"},
		{"a%2Fb.example", false, "a%2fb.example"}, // a '/' is no part of a name: the escape stays
		{"a%2fb.example", false, "a%2fb.example"},
		{"my_host.internal", false, "my_host.internal"}, // not a DNS name IDNA accepts: lower-cased only
		{"MY_HOST.internal", false, "my_host.internal"},
		{"", false, ""},
	}
	for _, tc := range tests {
		if got := canonicalHost(tc.host, tc.tls); got != tc.want {
			t.Errorf("canonicalHost(%q, tls %v) = %q, want %q", tc.host, tc.tls, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalHost("api.example:8443", false) }); n != 0 {
		t.Errorf("a host in canonical form: %v allocations, want 0", n)
	}
}

func TestCanonicalEscapes(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/pay_now", "/pay_now"},
		{"/pay%5Fnow", "/pay_now"},
		{"/pay%5fnow", "/pay_now"},
		{"/%7Euser/%41%2d%2E", "/~user/A-."},
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb", "/a%2Fb"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/a%20b?q=%5f%2b", "/a%20b?q=_%2B"},
		{"/100%", "/100%"},
		{"/100%2", "/100%2"},
		{"/%zz%5F", "/%zz_"},
	}
	for _, tc := range tests {
		if got := canonicalEscapes(tc.in); got != tc.want {
			t.Errorf("canonicalEscapes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalEscapes("/charges/c1?x=1") }); n != 0 {
		t.Errorf("a target without escapes: %v allocations, want 0", n)
	}
}

func TestCanonicalPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/pay", "/pay"},
		{"/x/./pay", "/x/pay"},
		{"/y/../pay", "/pay"},
		{"/a/b/.", "/a/b/"},
		{"/a/b/..", "/a/"},
		{"/..", "/"},
		{"/.", "/"},
		{"/x/../../y", "/y"},
		{"/a/%2E/b", "/a/b"},
		{"/a/%2e%2E/b", "/b"},
		{"/a/.b/..c/...", "/a/.b/..c/..."},
		{"/a//b/../c", "/a//c"},
		{"/caf%c3%a9/./x", "/caf%C3%A9/x"},
	} {
		if got := canonicalPath(tt.in); got != tt.want {
			t.Errorf("canonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"?x=1", "/?x=1"},
		{"/x/./pay?a=./b", "/x/pay?a=./b"},
		{"/p?q=%7e", "/p?q=~"},
		// A byte a query may not hold raw is escaped, as in the path
		// (RFC 3986, 3.4: pchar, "/" and "?"); the client's escapes stay.
		{"/pay?note=caf\u00e9", "/pay?note=caf%C3%A9"},
		{"/pay?ids={a}&x=a|b^c`d\"e\\f<g>", "/pay?ids=%7Ba%7D&x=a%7Cb%5Ec%60d%22e%5Cf%3Cg%3E"},
		{"/pay?a=[1]", "/pay?a=%5B1%5D"},
		{"/pay?a=%5b1%5D", "/pay?a=%5B1%5D"},
		{"/pay?a=100%", "/pay?a=100%25"},
		{"/pay?q=a/b?c:d@e!$&'()*+,;=", "/pay?q=a/b?c:d@e!$&'()*+,;="},
		{"/pay?q=a%26b&c", "/pay?q=a%26b&c"}, // an escaped '&' is not a separator
		{"/pay/[x]?", "/pay/%5Bx%5D?"},
	} {
		if got := canonicalTarget(tt.in); got != tt.want {
			t.Errorf("canonicalTarget(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// escapeRaw keeps a raw path's escapes as written and escapes each byte
// that may not appear raw on its own: an escaped reserved character stays
// escaped beside a raw byte (review r33: url.URL.EscapedPath escaped the
// decoded path instead, and "/a%2Fb/{x}" became "/a/b/%7Bx%7D").
func TestEscapeRaw(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"/pay/ch_1", "/pay/ch_1"},
		{"/a:b;c=d,e@f$g&h+i~j!k*l'(m)[n]", "/a:b;c=d,e@f$g&h+i~j!k*l'(m)[n]"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%2fb/{x}", "/a%2fb/%7Bx%7D"},
		{"/files/a%2Fb/caf\u00e9", "/files/a%2Fb/caf%C3%A9"},
		{"/a b|c^d\"e<f>g\\h`i", "/a%20b%7Cc%5Ed%22e%3Cf%3Eg%5Ch%60i"},
		{"/100%", "/100%25"},
		{"/a%zz", "/a%25zz"},
		{"/a%2", "/a%252"},
		{"/a#b", "/a%23b"},
		{"/a\x00b\x7f", "/a%00b%7F"},
	} {
		if got := escapeRaw(tt.in); got != tt.want {
			t.Errorf("escapeRaw(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { escapeRaw("/charges/ch_1") }); n != 0 {
		t.Errorf("a path with nothing to escape: %v allocations, want 0", n)
	}
	// Two resources never share a spelling: an escaped '/' beside a raw
	// byte is not the '/' it stands for.
	for _, pair := range [][2]string{
		{"/a%2Fb/{x}", "/a/b/{x}"},
		{"/a%2Fb/caf\u00e9", "/a/b/caf\u00e9"},
		{"/a%3Fb|", "/a?b|"},
	} {
		a, b := escapedPath(mustParse(t, pair[0])), escapedPath(mustParse(t, pair[1]))
		if canonicalPath(a) == canonicalPath(b) {
			t.Errorf("%q and %q have one spelling: %q", pair[0], pair[1], canonicalPath(a))
		}
	}
	// One resource keeps one spelling: a raw byte and its escape.
	for _, pair := range [][2]string{
		{"/caf\u00e9/{x}", "/caf%C3%A9/%7bx%7D"},
		{"/a%2Fb/{x}", "/a%2fb/%7Bx}"},
	} {
		a, b := escapedPath(mustParse(t, pair[0])), escapedPath(mustParse(t, pair[1]))
		if canonicalPath(a) != canonicalPath(b) {
			t.Errorf("%q and %q: %q and %q, want one spelling", pair[0], pair[1], canonicalPath(a), canonicalPath(b))
		}
	}
}

func mustParse(t *testing.T, uri string) *url.URL {
	t.Helper()
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
