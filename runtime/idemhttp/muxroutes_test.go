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
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// A ServeMux matches a pattern's host exactly as the client sent it:
// "A.EXAMPLE" and "a.example." are not "a.example" to it, so it sends them
// to another route (a catch-all, another host's subtree) than "a.example".
// The identity spells the host one way (TestIdentitySpellings), so a route
// no pattern pins named the request by that spelling alone and met the
// pinned route's operation ("POST a.example/pay") or the other subtree's:
// with one key, whichever route ran first answered for both, and the other
// handler never ran (a fresh review's finding, 5 of 5 runs). A request a
// mux routes by a pattern that does not pin the route now names that
// pattern too. Every store; both orders; and a literal path spelling a
// pattern ("/charges/{$}", sent without a Host) against that pattern.
func TestMuxRoutesNeverShareAnIdentity(t *testing.T) {
	type route struct {
		pattern string
		answer  string // the handler's body
	}
	type send struct {
		proto, host, target string
		want                string // the answer of the route the mux sends it to
	}
	cases := []struct {
		name   string
		routes []route
		sends  [][2]send // each pair: one key, both orders
	}{
		{
			name:   "a host-pinned route and the catch-all",
			routes: []route{{"POST a.example/pay", "paid"}, {"/", "catch-all"}},
			sends: [][2]send{
				{{"HTTP/1.1", "a.example", "/pay", "paid"}, {"HTTP/1.1", "A.EXAMPLE", "/pay", "catch-all"}},
				{{"HTTP/1.1", "a.example", "/pay", "paid"}, {"HTTP/1.1", "a.example.", "/pay", "catch-all"}},
				{{"HTTP/1.1", "a.example", "/pay", "paid"}, {"HTTP/1.1", "A.example", "/pay", "catch-all"}},
			},
		},
		{
			name:   "two host subtrees",
			routes: []route{{"a.example/", "host route"}, {"xn--bcher-kva.example/", "bücher"}, {"/", "fallback"}},
			sends: [][2]send{
				{{"HTTP/1.1", "a.example", "/orders", "host route"}, {"HTTP/1.1", "A.EXAMPLE", "/orders", "fallback"}},
				{{"HTTP/1.1", "a.example", "/orders", "host route"}, {"HTTP/1.1", "a.example.", "/orders", "fallback"}},
			},
		},
		{
			name:   "a path that spells the pinned pattern",
			routes: []route{{"POST /charges/{$}", "charged"}, {"/", "catch-all"}},
			sends: [][2]send{
				{{"HTTP/1.1", "x.example", "/charges/", "charged"}, {"HTTP/1.0", "", "/charges/{$}", "catch-all"}},
			},
		},
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					runs := map[string]*atomic.Int32{}
					mux := http.NewServeMux()
					for _, r := range c.routes {
						n := new(atomic.Int32)
						runs[r.answer] = n
						mux.HandleFunc(r.pattern, func(w http.ResponseWriter, _ *http.Request) {
							n.Add(1)
							w.WriteHeader(http.StatusCreated)
							_, _ = io.WriteString(w, r.answer)
						})
					}
					tenant := teststores.Unique()
					scope := idemhttp.Scope(func(*http.Request) string { return tenant })
					srv := httptest.NewServer(idemhttp.Middleware(rt, quiet(), scope)(mux))
					defer srv.Close()
					addr := strings.TrimPrefix(srv.URL, "http://")
					for i, pair := range c.sends {
						for order, p := range [][2]send{pair, {pair[1], pair[0]}} {
							for _, n := range runs {
								n.Store(0)
							}
							key := fmt.Sprintf("k%d-%d", i, order)
							for _, s := range p {
								if got := rawSend(t, addr, s.proto, s.host, s.target, key); got != s.want {
									t.Errorf("%s %s (Host %q) after %s (Host %q), one key: got %q, want %q (its own route's answer)",
										s.proto, s.target, s.host, p[0].target, p[0].host, got, s.want)
								}
							}
							for answer, n := range runs {
								if want := int32(0); answer == p[0].want || answer == p[1].want {
									if n.Load() != 1 {
										t.Errorf("%v: the route answering %q ran %d times, want once", p, answer, n.Load())
									}
								} else if n.Load() != want {
									t.Errorf("%v: the route answering %q ran %d times", p, answer, n.Load())
								}
							}
						}
					}
				})
			}
		})
	}
}

// rawSend sends a POST with key and body "{}" exactly as given (a Host
// header only when host is not empty) and returns the response's body.
func rawSend(t *testing.T, addr, proto, host, target, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s %s\r\n", target, proto)
	if host != "" {
		fmt.Fprintf(&b, "Host: %s\r\n", host)
	}
	fmt.Fprintf(&b, "Idempotency-Key: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", key)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// Two services behind one listener, mounted by host on an outer ServeMux
// ("a.example/" and "b.example/"), each an inner ServeMux routing
// "POST /pay": the innermost pattern alone named both routes "POST /pay",
// so one key paid on a.example was replayed to b.example, whose handler
// never ran (fresh review, 5 of 5). The outer pattern's host now goes in
// front of an inner pattern that has none: "POST a.example/pay". With the
// middleware around the outer mux, and around each inner mux.
func TestHostMountedMuxes(t *testing.T) {
	placements := []struct {
		name  string
		build func(mw func(http.Handler) http.Handler, inner func(string) http.Handler) http.Handler
	}{
		{"around the outer mux", func(mw func(http.Handler) http.Handler, inner func(string) http.Handler) http.Handler {
			outer := http.NewServeMux()
			outer.Handle("a.example/", inner("a"))
			outer.Handle("b.example/", inner("b"))
			return mw(outer)
		}},
		{"around each inner mux", func(mw func(http.Handler) http.Handler, inner func(string) http.Handler) http.Handler {
			outer := http.NewServeMux()
			outer.Handle("a.example/", mw(inner("a")))
			outer.Handle("b.example/", mw(inner("b")))
			return outer
		}},
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range placements {
				t.Run(p.name, func(t *testing.T) {
					runs := map[string]*atomic.Int32{"a": new(atomic.Int32), "b": new(atomic.Int32)}
					inner := func(name string) http.Handler {
						m := http.NewServeMux()
						m.HandleFunc("POST /pay", func(w http.ResponseWriter, _ *http.Request) {
							runs[name].Add(1)
							w.WriteHeader(http.StatusCreated)
							_, _ = io.WriteString(w, name+" paid")
						})
						return m
					}
					tenant := teststores.Unique()
					mw := idemhttp.Middleware(rt, quiet(), idemhttp.Scope(func(*http.Request) string { return tenant }))
					srv := httptest.NewServer(p.build(mw, inner))
					defer srv.Close()
					addr := strings.TrimPrefix(srv.URL, "http://")
					for _, host := range []string{"a.example", "b.example", "a.example"} {
						want := host[:1] + " paid"
						if got := rawSend(t, addr, "HTTP/1.1", host, "/pay", "order-1"); got != want {
							t.Errorf("POST /pay on %s: got %q, want %q", host, got, want)
						}
					}
					if runs["a"].Load() != 1 || runs["b"].Load() != 1 {
						t.Errorf("a.example's handler ran %d times, b.example's %d; want once each", runs["a"].Load(), runs["b"].Load())
					}
				})
			}
		})
	}
}

// Two middleware instances on one runtime and scope: a public ServeMux
// that pins "POST a.example/pay", and an internal plain handler (no
// pattern) reached with the same Host. The unpinned request's name, the
// method, the host and the path, was spelled exactly as the pinned
// route's, so the internal answer was replayed to the payment (fresh
// review, 5 of 5). A name of the request as sent now says so.
func TestUnpinnedNeverSpellsAPattern(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			tenant := teststores.Unique()
			scope := idemhttp.Scope(func(*http.Request) string { return tenant })
			var pays, jobs atomic.Int32
			public := http.NewServeMux()
			public.HandleFunc("POST a.example/pay", func(w http.ResponseWriter, _ *http.Request) {
				pays.Add(1)
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "paid")
			})
			internal := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				jobs.Add(1)
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, "internal job")
			})
			pub := httptest.NewServer(idemhttp.Middleware(rt, quiet(), scope)(public))
			defer pub.Close()
			in := httptest.NewServer(idemhttp.Middleware(rt, quiet(), scope)(internal))
			defer in.Close()
			if got := rawSend(t, strings.TrimPrefix(in.URL, "http://"), "HTTP/1.1", "a.example", "/pay", "k1"); got != "internal job" {
				t.Fatalf("internal: %q", got)
			}
			if got := rawSend(t, strings.TrimPrefix(pub.URL, "http://"), "HTTP/1.1", "a.example", "/pay", "k1"); got != "paid" {
				t.Errorf("the public payment with the internal request's key got %q, want its own \"paid\"", got)
			}
			if pays.Load() != 1 || jobs.Load() != 1 {
				t.Errorf("payment ran %d times, internal job %d; want once each", pays.Load(), jobs.Load())
			}
		})
	}
}
