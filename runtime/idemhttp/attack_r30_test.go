package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md, "One request, many spellings": "dot-segments (RFC 3986,
// 5.2.4): /x/./pay is /x/pay, /y/../pay is /pay, /a/%2E%2E/b is /b" are the
// same request, "so a retry sent under another spelling replays instead of
// running again or getting 422"; the README: "the handler runs at most once
// per (scope, route as the client sees it, key)".
//
// A ServeMux answers a path with dot-segments with a redirect to the clean
// path (307 since Go 1.22's method-preserving redirects, so a client resends
// the POST with its body and headers, the Idempotency-Key among them). The
// middleware around the mux runs that redirect as the route's effect
// (mux.Handler names the pattern of the clean path) and records it under
// the canonical spelling; the redirected request, the clean path the server
// itself pointed to, is "the same request" and gets the recorded redirect
// replayed: a redirect to itself. The handler never runs for the key (for
// the record's TTL); a client that follows redirects (net/http's Client, with
// or without idemhttp.Transport) stops after 10 of them. Without the
// middleware the same client gets the handler's 201 after one redirect.
//
// An empty segment ("/pay//x", "//pay/x": a base URL ending in "/" joined
// with a path) is cleaned by the mux the same way, but it is not "the same
// request" to the middleware (another path): the redirected request to the
// path the server pointed at gets 422 key-reused, and the handler never
// runs for the key.
//
// Schedule: a real server, the middleware around a ServeMux routing POST
// /pay/{id}; one POST to each spelling with a key, sent by http.Client,
// which follows the 307; without the middleware each gets 201.
func TestR30DotSegmentRedirectPoisonsKey(t *testing.T) {
	// The route pinned by its pattern, or left to the handler by a subtree
	// pattern (the request is then named as sent, and the redirected
	// request's clean path is the redirect's own: recorded, the redirect
	// would be replayed to it).
	for _, pattern := range []string{"POST /pay/{id}", "POST /pay/"} {
		for _, target := range []string{"/pay/./x", "/pay/y/../x", "/pay//x", "//pay/x"} {
			for _, withMiddleware := range []bool{false, true} {
				name := pattern + target + "/bare"
				if withMiddleware {
					name = pattern + target + "/middleware"
				}
				t.Run(name, func(t *testing.T) {
					rt, err := runtime.New(memstore.New())
					if err != nil {
						t.Fatal(err)
					}
					var runs atomic.Int32
					mux := http.NewServeMux()
					mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
						runs.Add(1)
						w.WriteHeader(http.StatusCreated)
					})
					var h http.Handler = mux
					if withMiddleware {
						h = idemhttp.Middleware(rt)(mux)
					}
					srv := httptest.NewServer(h)
					defer srv.Close()
					req, err := http.NewRequest("POST", srv.URL+target, strings.NewReader(`{"amount":100}`))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Idempotency-Key", "k-r30-dot")
					resp, err := srv.Client().Do(req)
					status := 0
					if resp != nil {
						status = resp.StatusCode
						resp.Body.Close()
					}
					t.Logf("POST %s: status %d, err %v; handler runs %d", target, status, err, runs.Load())
					if err != nil || status != http.StatusCreated || runs.Load() != 1 {
						t.Fatalf("POST %s with a key, redirects followed: status %d, err %v, handler runs %d; want 201 from one run (as without the middleware)",
							target, status, err, runs.Load())
					}
				})
			}
		}
	}
}

// docs/http.md: "Put the middleware around the http.ServeMux (or inside
// it, around one handler; ...)": "wherever it sits"; and two middlewares
// on one runtime are considered ("another middleware's pinned POST
// api.example/charges/ch_1 on the same runtime never meets it"). With the
// middleware both around the mux and around one of its handlers (a
// service-wide wrapper plus a handler a library ships wrapped), both name
// the route's operation alike (the pattern, r.Pattern): the inner one is a
// duplicate of the outer one's own call in flight, waits MaxWait and
// answers 409 in-progress, which the outer one records as the route's
// response and replays ("Idempotent-Replayed: true", Retry-After: 1) for
// the TTL. The handler never runs for the key; a draft client retries the
// 409 until the TTL.
// Schedule: one runtime (MaxWait 200ms), the middleware around a mux and
// around its POST /pay/{id} handler; a request with a key, then its retry.
func TestR30NestedPlacementNeverRuns(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	mw := idemhttp.Middleware(rt)
	mux := http.NewServeMux()
	mux.Handle("POST /pay/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	h := mw(mux)
	var codes []int
	for i := 0; i < 2; i++ {
		r := httptest.NewRequest("POST", "/pay/x", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", "k-r30-nested")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body, _ := io.ReadAll(w.Result().Body)
		t.Logf("attempt %d: %d replayed=%q %s", i+1, w.Code, w.Header().Get("Idempotent-Replayed"), body)
		codes = append(codes, w.Code)
	}
	if runs.Load() != 1 {
		t.Fatalf("the middleware around the mux and around the handler: answers %v, handler runs %d; want one run (201)", codes, runs.Load())
	}
}
