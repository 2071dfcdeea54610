package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// TestEmptyPathAndDotSegments: an http URI with an empty path and the same URI
// with the path "/" are one resource (RFC 3986, 6.2.3: "http://example.com"
// and "http://example.com/" are equivalent; RFC 9112, 3.2.1 has a client
// send "/" for an empty path). A request in absolute form with an empty
// path ("POST http://a.example HTTP/1.1", as a forward proxy may pass it
// on) and its retry in origin form ("POST / HTTP/1.1") get two identities
// where no pattern pins the route: the handler runs twice for one key.
//
// Promise (docs/http.md, "One request, many spellings"): "What a client may
// spell differently without meaning another resource (RFC 3986, 6.2.2 and
// 6.2.3; RFC 9110, 4.2.3) is spelled one way in the operation and the
// fingerprint, so a retry sent under another spelling replays instead of
// running again or getting 422". The absolute form itself is handled (a
// retry of "POST /pay" as "POST http://A.EXAMPLE:80/pay" replays); only
// the empty path is not. Nor are dot-segments ("/x/./pay", "/y/../pay"),
// which RFC 3986, 6.2.2.3, part of the cited 6.2.2, removes.
//
// Schedule: for each pair, the first spelling then the second, same key,
// same body, on a plain handler (no ServeMux: a ServeMux redirects an empty
// path to "/" before the middleware sees it) behind idemhttp on
// PostgreSQL. Invariant: the handler runs once per pair.
//
// Run: go test ./runtime/idemhttp/ -run TestEmptyPathAndDotSegments -count=3 -v
func TestEmptyPathAndDotSegments(t *testing.T) {
	rt, err := runtime.New(teststores.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "run %d", runs.Add(1))
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	send := func(requestLine, key string) (int, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s\r\nHost: a.example\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi", requestLine, key)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, pair := range [][2]string{
		{"POST http://a.example HTTP/1.1", "POST / HTTP/1.1"},
		{"POST / HTTP/1.1", "POST http://a.example HTTP/1.1"},
		{"POST http://a.example?x=1 HTTP/1.1", "POST /?x=1 HTTP/1.1"},
		{"POST http://a.example:80 HTTP/1.1", "POST http://A.EXAMPLE/ HTTP/1.1"},
		// RFC 3986, 6.2.2.3 (path segment normalization, part of the 6.2.2
		// the doc cites): dot-segments.
		{"POST /x/./pay HTTP/1.1", "POST /x/pay HTTP/1.1"},
		{"POST /y/../pay HTTP/1.1", "POST /pay HTTP/1.1"},
	} {
		key := fmt.Sprintf("empty-%d-%s", i, teststores.Unique())
		before := runs.Load()
		s1, b1 := send(pair[0], key)
		s2, b2 := send(pair[1], key)
		if n := runs.Load() - before; n != 1 {
			t.Errorf("%q then %q, one key: the handler ran %d times (%d %q, then %d %q)", pair[0], pair[1], n, s1, b1, s2, b2)
		}
	}
}
