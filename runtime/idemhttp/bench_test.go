package idemhttp_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// The in-process benchmarks measure the middleware's own cost without the
// network: one request served by a ServeMux, bare or behind the middleware
// on a memory store, into a ResponseWriter reused across iterations. Every
// variant builds its request the same way (the key header is set even
// where nothing reads it), so the differences are the middleware's.
// bench/http.sh measures the same over loopback, beside fiber.

const benchBody = `{"amount":1000,"currency":"eur"}`

// sink is a ResponseWriter that keeps nothing but the status: a client that
// reads the response and throws it away.
type sink struct {
	h      http.Header
	status int
	n      int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.status = code }
func (s *sink) Write(p []byte) (int, error) { s.n += len(p); return len(p), nil }
func (s *sink) reset() {
	clear(s.h)
	s.status, s.n = 0, 0
}

func benchMux() *http.ServeMux {
	var n int
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"charge":"ch_%d"}`, n)
	})
	return mux
}

// benchServe runs b.N requests through h, each with the key key(i).
func benchServe(b *testing.B, h http.Handler, key func(i int) string) {
	b.Helper()
	r, err := http.NewRequest(http.MethodPost, "http://api.example/charges", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RequestURI = "/charges"
	r.Header.Set("Content-Type", "application/json")
	body := strings.NewReader(benchBody)
	r.Body, r.ContentLength = io.NopCloser(body), int64(len(benchBody))
	w := &sink{h: http.Header{}}
	serve := func(i int) {
		body.Reset(benchBody)
		r.Header[idemhttp.DefaultHeader] = []string{key(i)}
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated {
			b.Fatalf("request %d: status %d", i, w.status)
		}
	}
	serve(0) // for replays, stores the record
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; b.Loop(); i++ {
		serve(i)
	}
}

// freshKeys returns a new 36-byte key for each i: one allocation, which
// the bare variant pays too.
func freshKeys(*testing.B) func(int) string {
	buf := []byte("8e03978e-40d5-43e8-bc93-")
	n := len(buf)
	return func(i int) string {
		buf = strconv.AppendInt(buf[:n], 100000000000+int64(i), 10)
		return string(buf)
	}
}

func sameKey(int) string { return "8e03978e-40d5-43e8-bc93-6894a57f9324" }

func benchMiddleware(b *testing.B) http.Handler {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	return idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(benchMux())
}

// BenchmarkMiddlewareBare is the floor: the same mux and handler without
// the middleware.
func BenchmarkMiddlewareBare(b *testing.B) { benchServe(b, benchMux(), freshKeys(b)) }

// BenchmarkMiddlewareFirst runs the handler for a new key every time.
func BenchmarkMiddlewareFirst(b *testing.B) { benchServe(b, benchMiddleware(b), freshKeys(b)) }

// BenchmarkMiddlewareReplay replays one key's stored response.
func BenchmarkMiddlewareReplay(b *testing.B) { benchServe(b, benchMiddleware(b), sameKey) }
