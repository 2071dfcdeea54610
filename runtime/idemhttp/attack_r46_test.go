// Review r46: idemhttp headers and trailers on the wire.

package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// headerLine returns the value of header name in a raw response's header
// block ("" when absent).
func r46HeaderLine(raw, name string) string {
	head, _, _ := strings.Cut(raw, "\r\n\r\n")
	for _, l := range strings.Split(head, "\r\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// A handler that names, in its Trailer declaration, a field net/http does
// not accept as a trailer (Content-Type, Cache-Control: RFC 9110 6.5.1;
// httpguts.ValidTrailerHeader) sends that field as a plain header, and net/http
// sends it so to the first client. It is no trailer: it must be recorded
// and replayed like any other header. The middleware drops every name the
// Trailer field lists from the record, so the replay loses the
// Content-Type (net/http sniffs another) and the Cache-Control: no-store.
func TestR46ForbiddenTrailerNameIsAHeaderInTheReplay(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Trailer", "Content-Type, Cache-Control, X-Checksum")
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"ch_1"}`)
		w.Header().Set("X-Checksum", "abc")
	}
	plain := httptest.NewServer(http.HandlerFunc(h))
	defer plain.Close()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
	defer mw.Close()
	p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
	first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	t.Logf("net/http:\n%s\nfirst:\n%s\nreplay:\n%s", p, first, replay)
	if p != first {
		t.Errorf("the first client's bytes differ from net/http alone's")
	}
	for _, name := range []string{"Content-Type", "Cache-Control"} {
		if got, want := r46HeaderLine(replay, name), r46HeaderLine(first, name); got != want {
			t.Errorf("%s: the first client got %q as a header, the replay %q", name, want, got)
		}
	}
}

// A handler that declares a Content-Length and then writes in two parts,
// the second past it: net/http sends the first part (the second Write
// fails with ErrContentLength). The first client gets "the response as
// written" (docs/http.md, behaviour table), so the part net/http took.
func TestR46ContentLengthOverrunInParts(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(201)
		io.WriteString(w, "ok")
		io.WriteString(w, "!!") // past the declared length
	}
	plain := httptest.NewServer(http.HandlerFunc(h))
	defer plain.Close()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
	defer mw.Close()
	p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
	first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	t.Logf("net/http: %q\nfirst: %q\nreplay: %q", p, first, replay)
	if p != first {
		t.Errorf("the first client's bytes differ from net/http alone's:\nnet/http: %q\nidemhttp: %q", p, first)
	}
}

// Transport: "A Retry-After over MaxRetryAfter ends the retries with that
// response." A delay-seconds value too large for an int64 (RFC 9110
// 10.2.3: delay-seconds = 1*DIGIT) is read as no Retry-After at all, and
// the request is retried at once, MaxAttempts times.
func TestR46HugeRetryAfterEndsRetries(t *testing.T) {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Retry-After", "99999999999999999999")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := idemhttp.NewClient(&idemhttp.Transport{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := attempts.Load(); n != 1 {
		t.Errorf("Retry-After: 99999999999999999999 (over MaxRetryAfter): %d attempts; want 1 (the retries end with that response)", n)
	}
}

type r46Ops struct {
	mu  sync.Mutex
	ops map[string]bool
}

func (o *r46Ops) Observe(_ context.Context, e runtime.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[e.Operation] = true
}

// Review r46 found a sub-mux mounted under a prefix stripped per request
// (a tenant in the path) labelled per tenant by otelidem's default label:
// the names keep the prefix as sent. docs/http.md and otelidem's doc now
// say so (each tenant's requests are an operation of their own, which
// keeps them apart; label with WithOperationLabel): this test holds the
// documented names.
func TestR46StripPrefixPerRequestNamesPerTenant(t *testing.T) {
	obs := &r46Ops{ops: map[string]bool{}}
	rt, err := runtime.New(memstore.New(), runtime.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	sub := http.NewServeMux()
	sub.HandleFunc("POST /pay/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	inner := idemhttp.Middleware(rt)(sub)
	root := http.NewServeMux()
	root.HandleFunc("/t/{tenant}/", func(w http.ResponseWriter, r *http.Request) {
		http.StripPrefix("/t/"+r.PathValue("tenant"), inner).ServeHTTP(w, r)
	})
	srv := httptest.NewServer(root)
	defer srv.Close()
	for i := range 5 {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/t/tenant%d/pay/1", srv.URL, i), strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for i := range 5 {
		if op := fmt.Sprintf("POST /t/tenant%d/pay/{id}", i); !obs.ops[op] {
			t.Errorf("no operation %q (documented: the prefix stripped per request is put back as sent); got %v", op, obs.ops)
		}
	}
	if n := len(obs.ops); n != 5 {
		t.Errorf("%d operations, want one per tenant (5): %v", n, obs.ops)
	}
}

// docs/http.md, Headers: trailers "reach the first client as trailers,
// with the values the handler's map holds when it returns", the first
// client's bytes "as from net/http alone". A trailer set before the
// status (declared in Trailer, or named with http.TrailerPrefix) and
// deleted before the handler returns: net/http sends no such trailer (its
// map holds none); the middleware sends the value the map held at the
// status.
func TestR46TrailerDeletedBeforeReturn(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"declared": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			w.Header().Set("X-Checksum", "provisional")
			w.WriteHeader(201)
			io.WriteString(w, "body")
			w.Header().Del("X-Checksum") // no checksum after all
		},
		"prefixed": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(http.TrailerPrefix+"X-Checksum", "provisional")
			w.WriteHeader(201)
			io.WriteString(w, "body")
			w.Header().Del(http.TrailerPrefix + "X-Checksum")
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			plain := httptest.NewServer(h)
			defer plain.Close()
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			mw := httptest.NewServer(idemhttp.Middleware(rt)(h))
			defer mw.Close()
			p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
			f := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			if p != f {
				t.Errorf("the first client's bytes differ from net/http alone's:\nnet/http: %q\nidemhttp: %q", p, f)
			}
		})
	}
}
