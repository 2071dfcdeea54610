package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// parsed is what original gives without its fast path: the target parsed
// by url.ParseRequestURI, its path escaped as sent (escapedPath).
func parsed(uri string) (path, target string, ok bool) {
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return "", "", false
	}
	return escapedPath(u), withQuery(escapedPath(u), u.RawQuery), true
}

var targets = []string{
	"/charges", "/charges/", "/", "//x", "/a:b/c;d=e,f@g$h&i+j~k_l-m.n",
	"/charges?", "/charges?a=1&b=2", "/charges??", "/c?q=%zz#frag", "/c#frag",
	"/a%2Fb", "/a%zz", "/a b", "/a(b)!*'", "/caf\u00e9", "/a\x00b", "/a?b\x7f",
	"/a[1]", "/a|b", "/a\"b", "/a<b>", "/a\\b", "/a^b`c{d}", "*", "http://h.example/x?y",
	"/a%2Fb/{x}", "/a%2fb/caf\u00e9", "http://h.example/a%2Fb/|?q=1",
}

// The fast path gives, for every target it takes, what parsing gives. The
// request's URL is the server's parse of the target (a target the server
// would refuse gets one of another path, which original then takes).
func TestOriginalAsParsed(t *testing.T) {
	for _, uri := range targets {
		u, err := url.ParseRequestURI(uri)
		if err != nil {
			u = &url.URL{Path: "/fallback"}
		}
		r := &http.Request{RequestURI: uri, URL: u}
		path, target := original(r, escapedPath(r.URL))
		wp, wt, ok := parsed(uri)
		if !ok {
			wp, wt = "/fallback", "/fallback"
		}
		if path != wp || target != wt {
			t.Errorf("%q: got (%q, %q), want (%q, %q)", uri, path, target, wp, wt)
		}
	}
}

// A request derived with r.Clone and given another path or query keeps the
// RequestURI of the one it came from: original takes its URL, not the
// RequestURI, unless the URL's path is what http.StripPrefix left of the
// RequestURI's and the query is its query; inside a placement's handler or
// outside any (review r38: a request derived below a placement that passed
// its own through, or with none in front, is one of the handler's too).
func TestOriginalOfDerivedRequest(t *testing.T) {
	for _, c := range []struct {
		uri, path, rawPath, rawQuery string
		inside                       bool // the request runs inside a placement's handler
		wantPath, wantTarget         string
	}{
		{"/orders?x=1", "/orders", "", "x=1", true, "/orders", "/orders?x=1"},              // as served
		{"/pay/ch_1", "/ch_1", "", "", true, "/pay/ch_1", "/pay/ch_1"},                     // StripPrefix("/pay")
		{"/pay/a%2Fb", "/a/b", "/a%2Fb", "", true, "/pay/a%2Fb", "/pay/a%2Fb"},             // StripPrefix keeps RawPath's escapes
		{"/orders", "/ledger/entries", "", "", true, "/ledger/entries", "/ledger/entries"}, // a clone sent elsewhere
		{"/orders?x=1", "/ledger/entries", "", "y=2", true, "/ledger/entries", "/ledger/entries?y=2"},
		{"http://h.example/orders", "/ledger", "", "", true, "/ledger", "/ledger"},
		{"/orders?x=1", "/orders", "", "y=2", true, "/orders", "/orders?y=2"}, // only the query changed
		{"/orders", "/orders", "", "y=2", true, "/orders", "/orders?y=2"},
		// URL.Path set, the client's RawPath left behind (url.URL ignores
		// it): the path is URL.Path's.
		{"/orders/a%2Fb", "/ledger/e1", "/orders/a%2Fb", "", true, "/ledger/e1", "/ledger/e1"},
		// Outside any placement's handler the same: a request derived
		// there, or rewritten in front of the middleware, is named by what
		// the middleware sees (a prefix-stripping mount aside).
		{"/pay/ch_1", "/ch_1", "", "", false, "/pay/ch_1", "/pay/ch_1"},
		{"/tenants/a/orders/new", "/orders/create", "", "", false, "/orders/create", "/orders/create"},
		{"/orders?t=a", "/orders", "", "", false, "/orders", "/orders"},
		{"/orders/a%2Fb", "/ledger/e1", "/orders/a%2Fb", "", false, "/ledger/e1", "/ledger/e1"},
	} {
		u := &url.URL{Path: c.path, RawPath: c.rawPath, RawQuery: c.rawQuery}
		r := &http.Request{RequestURI: c.uri, URL: u}
		if c.inside {
			r = r.WithContext(context.WithValue(context.Background(), outerKey{}, &exchange{}))
		}
		path, target := original(r, escapedPath(u))
		if path != c.wantPath || target != c.wantTarget {
			t.Errorf("RequestURI %q, URL path %q raw %q query %q, inside a placement %v: got (%q, %q), want (%q, %q)",
				c.uri, c.path, c.rawPath, c.rawQuery, c.inside, path, target, c.wantPath, c.wantTarget)
		}
	}
}

// escapedPath reads a RawPath only while it spells the URL's Path.
func TestEscapedPathStaleRawPath(t *testing.T) {
	for _, c := range []struct{ path, raw, want string }{
		{"/a/b", "/a%2Fb", "/a%2Fb"},
		{"/ledger/e1", "/orders/a%2Fb", "/ledger/e1"},
		{"/caf\u00e9 x", "/caf%C3%A9%20x", "/caf%C3%A9%20x"},
		{"/{x}", "/{x}", "/%7Bx%7D"},
	} {
		if got := escapedPath(&url.URL{Path: c.path, RawPath: c.raw}); got != c.want {
			t.Errorf("Path %q RawPath %q: %q, want %q", c.path, c.raw, got, c.want)
		}
	}
}

func FuzzPlainPath(f *testing.F) {
	for _, uri := range targets {
		f.Add(uri)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		if uri == "" {
			return
		}
		p, ok := plainPath(uri)
		if !ok {
			return
		}
		wp, wt, pok := parsed(uri)
		target := uri
		if len(p) == len(uri)-1 {
			target = p
		}
		if !pok || p != wp || target != wt {
			t.Fatalf("%q: fast (%q, %q), parsed (%q, %q, %v)", uri, p, target, wp, wt, pok)
		}
	})
}

func TestReadBody(t *testing.T) {
	const max = 10
	for _, c := range []struct {
		body   string
		length int64
		want   string
		err    bool
	}{
		{"", 0, "", false},
		{"", -1, "", false},
		{"abc", 3, "abc", false},
		{"abc", -1, "abc", false},
		{"abc", 1, "abc", false},   // a length that lies short
		{"abc", 100, "abc", false}, // or long
		{strings.Repeat("x", max), max, strings.Repeat("x", max), false},
		{strings.Repeat("x", max+1), max + 1, strings.Repeat("x", max+1), false}, // over: max+1 read
		{strings.Repeat("x", 100), -1, strings.Repeat("x", max+1), false},
		{strings.Repeat("x", 100), 5, strings.Repeat("x", max+1), false},
		{strings.Repeat("x", 1000), -1, strings.Repeat("x", max+1), false},
	} {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(c.body)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := readBody(r, c.length, max, nil)
			if string(got) != c.want || (err != nil) != c.err {
				t.Errorf("%d bytes, length %d, one byte %v: got %q, %v", len(c.body), c.length, oneByte, got, err)
			}
		}
	}
	boom := errors.New("boom")
	if _, err := readBody(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom)), -1, max, nil); !errors.Is(err, boom) {
		t.Errorf("a failing body: %v", err)
	}
	if got, err := readBody(nil, -1, max, nil); len(got) != 0 || err != nil {
		t.Errorf("no body: %q, %v", got, err)
	}
	// A declared length past maxUpfront is not allocated before the
	// bytes arrive.
	if got, _ := readBody(strings.NewReader("short"), 1<<20, 1<<20, nil); cap(got) > maxUpfront+1 {
		t.Errorf("a body that declares 1 MiB and sends 5 bytes: a buffer of %d bytes", cap(got))
	}
	big := bytes.Repeat([]byte("y"), 5000)
	if got, _ := readBody(bytes.NewReader(big), -1, 1<<20, make([]byte, 0, 100)); !bytes.Equal(got, big) {
		t.Errorf("a body past the first buffer: %d bytes", len(got))
	}
}

// The operation cache holds at most maxOps names, and names built past it
// are the same.
func TestOpCacheBounded(t *testing.T) {
	var c opCache
	builds := 0
	for i := range 2 * maxOps {
		m := "M" + strconv.Itoa(i)
		want := m + " /x"
		for range 2 {
			if got := c.name(m, "/x", func() string { builds++; return want }); got != want {
				t.Fatalf("%s: got %q", m, got)
			}
		}
	}
	if n := len(*c.m.Load()); n != maxOps {
		t.Errorf("%d names cached, want %d", n, maxOps)
	}
	if want := maxOps + 2*maxOps; builds != want { // once each while cached, twice each past the bound
		t.Errorf("%d builds, want %d", builds, want)
	}
}
