package idemhttp_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

var wireDate = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)

// rawExchange sends one POST with an idempotency key and returns everything
// the server wrote (1xx, final response, body, trailers), Date removed.
func rawExchange(t *testing.T, addr, method, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s /p HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", method, key)
	b, _ := io.ReadAll(c)
	return wireDate.ReplaceAllString(string(b), "")
}

var wireHeaderCases = []struct {
	name string
	h    http.HandlerFunc
}{
	{"value mutated in place after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "early")
		v := w.Header()["X-A"]
		w.WriteHeader(201)
		v[0] = "late"
		io.WriteString(w, "body")
	}},
	{"value mutated in place after first Write", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "early")
		v := w.Header()["X-A"]
		io.WriteString(w, "body")
		v[0] = "late"
	}},
	{"value mutated in place after 103", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		v := w.Header()["Link"]
		w.WriteHeader(103)
		v[0] = "</b.css>; rel=preload"
		w.WriteHeader(201)
	}},
	{"changed after Flush", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "early")
		io.WriteString(w, "part1")
		w.(http.Flusher).Flush()
		w.Header().Set("X-A", "late")
		w.Header().Set("X-B", "late")
		io.WriteString(w, "part2")
	}},
	{"in place after Flush via ResponseController", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "early")
		v := w.Header()["X-A"]
		w.WriteHeader(202)
		_ = http.NewResponseController(w).Flush()
		v[0] = "late"
		io.WriteString(w, "part2")
	}},
	{"WriteHeader twice", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "1")
		w.WriteHeader(201)
		w.Header().Set("X-A", "2")
		w.WriteHeader(202)
		io.WriteString(w, "b")
	}},
	{"204 with body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "1")
		w.WriteHeader(204)
		io.WriteString(w, "b")
	}},
	{"304", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(304)
	}},
	{"prefixed trailer set before status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(http.TrailerPrefix+"X-T", "early")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set(http.TrailerPrefix+"X-T", "sum")
	}},
	{"prefixed trailer set after status, small body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set(http.TrailerPrefix+"X-T", "sum")
	}},
	{"prefixed trailer set after status, chunked by a Flush", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-T", "sum")
	}},
	{"declared trailer value mutated in place", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "a")
		v := w.Header()["X-T"]
		v[0] = "b"
	}},
	{"Trailer declared after status", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		w.Header().Set("Trailer", "X-T")
		io.WriteString(w, "body")
		w.Header().Set("X-T", "a")
	}},
	{"Trailer declared, in place change of Trailer value", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		v := w.Header()["Trailer"]
		w.WriteHeader(201)
		v[0] = "X-U"
		io.WriteString(w, "body")
		w.Header().Set("X-T", "a")
		w.Header().Set("X-U", "b")
	}},
	{"Content-Length set by handler", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "body")
	}},
	{"Content-Type sniffed after header in place", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html>x</html>")
	}},
}

// TestHeadersOnTheWireAsNetHTTP: the same handler behind net/http alone
// and behind the middleware gives the first client the same bytes
// (docs/http.md, Headers: "as from net/http alone"), for POST and HEAD:
// headers changed or changed in place after the status, 1xx, Flush,
// trailers declared or prefixed, WriteHeader twice, 204, 304. (Review
// r45: a value changed in place after the status, and a Trailer
// declaration changed so, reached the first client and the record.)
func TestHeadersOnTheWireAsNetHTTP(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodHead} {
		t.Run(method, func(t *testing.T) {
			testenv.Within(t, 30*time.Second, func() {
				for _, c := range wireHeaderCases {
					plain := httptest.NewServer(c.h)
					rt, err := runtime.New(memstore.New())
					if err != nil {
						t.Fatal(err)
					}
					mw := httptest.NewServer(idemhttp.Middleware(rt)(c.h))
					p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), method, "k")
					f := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), method, "k")
					if p != f {
						t.Errorf("%s: the first client's bytes differ from net/http alone's:\nnet/http: %q\nidemhttp: %q", c.name, p, f)
					}
					plain.Close()
					mw.Close()
				}
			})
		})
	}
}
