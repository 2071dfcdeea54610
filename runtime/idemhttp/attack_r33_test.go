package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// r33serve parses a raw HTTP/1.1 request (as a server reads it off the
// wire: RequestURI as sent) and serves it through h.
func r33serve(t *testing.T, h http.Handler, raw string) *httptest.ResponseRecorder {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("ReadRequest(%q): %v", raw, err)
	}
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func r33raw(target, host, key, tenant, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nX-Tenant: %s\r\nContent-Length: %d\r\n\r\n%s",
		target, host, key, tenant, len(body), body)
}

// docs/http.md:122 (the table "One request, many spellings", column "not
// the same request"): "an escaped reserved character: `/a%2Fb` is not
// `/a/b`", and docs/http.md:79-83: where no pattern pins the route "the
// operation is the request as the client sent it: the method, the Host and
// the escaped path ... so two resources, or two hosts, never share an
// identity".
//
// The escaped path is url.URL.EscapedPath of the request target; when the
// target also holds a byte that may not appear raw in a path (a raw '{',
// '|', '^' or a raw UTF-8 byte, which Go's server accepts and curl or
// many clients send as is), EscapedPath gives up on the raw spelling and
// escapes the DECODED path: "/a%2Fb/{x}" becomes "/a/b/%7Bx%7D", exactly
// what "/a/b/{x}" becomes. The two resources get one operation and one
// fingerprint: the second request is answered with the first's response.
func TestR33EscapedSlashBesideRawByteSharesRecord(t *testing.T) {
	cases := []struct {
		name, first, second string
	}{
		{"control-no-raw-byte", "/files/a%2Fb/x", "/files/a/b/x"}, // passes: told apart
		{"brace", "/files/a%2Fb/{x}", "/files/a/b/{x}"},
		{"utf8", "/files/a%2Fb/caf\xc3\xa9", "/files/a/b/caf\xc3\xa9"},
		{"pipe", "/files/a%2Fb|c", "/files/a/b|c"},
	}
	for _, st := range teststores.All() {
		for _, c := range cases {
			t.Run(st.Name+"/"+c.name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t), runtime.WithLease(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int64
				// A router that sets no r.Pattern and routes by the raw
				// path, as chi does (chi's routePath is r.URL.RawPath when
				// set): "/files/a%2Fb/{x}" has the segments files, a%2Fb,
				// {x}; "/files/a/b/{x}" has four.
				inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					routePath := r.URL.RawPath
					if routePath == "" {
						routePath = r.URL.Path
					}
					segs := strings.Split(strings.Trim(routePath, "/"), "/")
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "run %d: route with %d segments %q wrote the resource %q", n, len(segs), segs, r.RequestURI)
				})
				h := idemhttp.Middleware(rt, idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(inner)
				tenant := teststores.Unique()
				testenv.Within(t, 15*time.Second, func() {
					a := r33serve(t, h, r33raw(c.first, "api.example", "k-1", tenant, `{"op":"put"}`))
					b := r33serve(t, h, r33raw(c.second, "api.example", "k-1", tenant, `{"op":"put"}`))
					body, _ := io.ReadAll(b.Body)
					if runs.Load() != 2 {
						t.Errorf("%s then %s (two resources, docs/http.md: %q is not %q): the handler ran %d time(s); the second got %d %s (Idempotent-Replayed: %q)",
							c.first, c.second, "/a%2Fb", "/a/b", runs.Load(), b.Code, body, b.Header().Get("Idempotent-Replayed"))
					}
					_ = a
				})
			})
		}
	}
}
