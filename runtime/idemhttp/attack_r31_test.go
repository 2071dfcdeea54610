package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md:124-129: "A router that answers such a spelling with a
// redirect to the clean path (http.ServeMux does, for dot-segments and
// empty segments ...) ran no handler: the middleware sends the redirect and
// records nothing (a 301, 302, 307 or 308 whose Location is the clean form
// of the request's own path), so the redirected request runs the handler,
// once." And the table row: "dot-segments (RFC 3986, 5.2.4): ... /a/%2E%2E/b
// is /b" are one request.
//
// Go's ServeMux cleans the ESCAPED path (r.URL.EscapedPath()): a path whose
// segment holds an escaped reserved character, "/pay/a%2Fb/../x", is one
// segment "a%2Fb" to the mux, which redirects (307) to "/pay/x". The
// middleware's cleanPathRedirect cleans the UNESCAPED r.URL.Path
// ("/pay/a/b/../x" -> "/pay/a/x"), does not recognise the mux's redirect
// and records it, under the canonical target "/pay/x" (its canonicalPath
// works on the escaped path, as the mux does). The redirected request,
// POST /pay/x with the same key, is the same identity and fingerprint: it
// gets the recorded 307 replayed, a redirect to itself; the handler never
// runs for the key. Without the middleware the client gets 201 after one
// redirect.
func TestR31EscapedSlashDotSegmentRedirectPoisonsKey(t *testing.T) {
	for _, c := range r31Cases() {
		withMiddleware, st := c.mw, c.st
		t.Run(c.name, func(t *testing.T) {
			h, runs := r31PayMux(t, st, withMiddleware)
			srv := httptest.NewServer(h)
			defer srv.Close()
			testenv.Within(t, 15*time.Second, func() {
				req, err := http.NewRequest("POST", srv.URL+"/pay/a%2Fb/../x", strings.NewReader(`{"amount":100}`))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Idempotency-Key", "k-r31-esc-dot")
				resp, err := srv.Client().Do(req)
				status := 0
				if resp != nil {
					status = resp.StatusCode
					resp.Body.Close()
				}
				t.Logf("POST /pay/a%%2Fb/../x: status %d, err %v; handler runs %d", status, err, runs.Load())
				if err != nil || status != http.StatusCreated || runs.Load() != 1 {
					t.Errorf("POST /pay/a%%2Fb/../x with a key, redirects followed: status %d, err %v, handler runs %d; want 201 from one run (as without the middleware)",
						status, err, runs.Load())
				}
			})
		})
	}
}

// The same gap for a path with any escape (a space, a non-ASCII id): the
// mux's redirect of "/pay/./caf%C3%A9" is to the clean path, which Go writes
// double-escaped ("/pay/caf%25C3%25A9"); the middleware records it under
// the canonical target "/pay/caf%C3%A9". The client's retry under the clean
// spelling (the same request, docs/http.md's table) gets that 307 replayed
// ("Idempotent-Replayed: true"): the handler never runs for the key. Without
// the middleware the retry gets 201.
func TestR31EscapedDotSegmentRedirectRecorded(t *testing.T) {
	for _, c := range r31Cases() {
		withMiddleware, st := c.mw, c.st
		t.Run(c.name, func(t *testing.T) {
			h, runs := r31PayMux(t, st, withMiddleware)
			var codes []int
			var replayed []string
			testenv.Within(t, 15*time.Second, func() {
				for _, target := range []string{"/pay/./caf%C3%A9", "/pay/caf%C3%A9"} {
					r := httptest.NewRequest("POST", target, strings.NewReader(`{"amount":100}`))
					r.Header.Set("Idempotency-Key", "k-r31-esc-dot2")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					codes = append(codes, w.Code)
					replayed = append(replayed, w.Header().Get("Idempotent-Replayed"))
					t.Logf("POST %s: %d Location=%q replayed=%q", target, w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"))
				}
			})
			if len(codes) != 2 || codes[0] != http.StatusTemporaryRedirect || codes[1] != http.StatusCreated || runs.Load() != 1 {
				t.Fatalf("POST /pay/./caf%%C3%%A9 then its clean spelling /pay/caf%%C3%%A9 with one key: answers %v (replayed %q), handler runs %d; want 307 then 201 from one run (the redirect is not recorded)",
					codes, replayed, runs.Load())
			}
		})
	}
}

// The reverse gap: a request the mux does NOT redirect, whose handler RAN
// and itself answered a redirect. docs/http.md (same lines) passes through
// unrecorded only a router's redirect that "ran no handler"; README: "the
// handler runs at most once per (scope, route as the client sees it, key)".
//
// A path whose segment escapes its slashes, POST /files/docs%2F..%2Freport,
// is clean to ServeMux (it cleans the escaped path): it routes it to POST
// /files/{path...} and the handler runs, with the path value
// "docs/../report". A handler that creates the file and answers a 302 to
// its clean location (http.Redirect, the common Post/Redirect/Get) matches
// cleanPathRedirect, which cleans the unescaped r.URL.Path
// ("/files/docs/../report" -> "/files/report"): the response is taken for
// the mux's redirect and not recorded, the key released, and the client's
// retry runs the handler again.
func TestR31HandlerRedirectToCleanPathRunsTwice(t *testing.T) {
	cases := []struct {
		name, target string
		handler      func(runs *atomic.Int32) http.Handler
	}{
		{
			// ServeMux routes it (its escaped path is clean), the handler runs.
			name: "servemux-escaped-slashes", target: "/files/docs%2F..%2Freport",
			handler: func(runs *atomic.Int32) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("POST /files/{path...}", func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1) // the effect: the file is created
					http.Redirect(w, r, "/files/"+path.Clean(r.PathValue("path")), http.StatusFound)
				})
				return mux
			},
		},
		{
			// A plain handler (docs/http.md: "no pattern at all (a plain
			// handler, another router)"), which does not clean paths.
			name: "plain-handler-dot-segment", target: "/files/./report",
			handler: func(runs *atomic.Int32) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					http.Redirect(w, r, path.Clean(r.URL.Path), http.StatusFound)
				})
			},
		},
	}
	for _, tc := range cases {
		for _, st := range teststores.All() {
			t.Run(tc.name+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				h := idemhttp.Middleware(rt)(tc.handler(&runs))
				var codes []int
				var replayed []string
				testenv.Within(t, 15*time.Second, func() {
					for i := 0; i < 2; i++ {
						r := httptest.NewRequest("POST", tc.target, strings.NewReader(`{"content":"x"}`))
						r.Header.Set("Idempotency-Key", "k-r31-handler-redirect")
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						codes = append(codes, w.Code)
						replayed = append(replayed, w.Header().Get("Idempotent-Replayed"))
						t.Logf("attempt %d: %d Location=%q replayed=%q; handler runs %d", i+1, w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), runs.Load())
					}
				})
				if runs.Load() != 1 {
					t.Fatalf("POST %s twice with one key, its handler answering 302 to the clean path: answers %v (replayed %q), handler runs %d; want one run, the retry replayed",
						tc.target, codes, replayed, runs.Load())
				}
			})
		}
	}
}

// docs/http.md:22-27: "In two places at once (around the mux and around a
// route), the outer one handles the request and the inner one passes it
// through to the handler when it names the same identity"; and the Query
// option's doc: "A duplicate that finds the request's record UNKNOWN (the
// handler answered 504, say) ... asks q instead of answering
// outcome-unknown, and a reconciler on the runtime converges the route's
// records with it. The middleware then stores each request's target and
// body with its record (only on routes with a query)".
//
// The route's query is registered by the middleware around the route (a
// route a library ships wrapped, with its query), on the runtime the
// service-wide middleware around the mux shares. Since 25.42 (e) the outer
// one claims and the inner one passes through: the outer one, without that
// Query in its own options, neither stores the request nor gives the call
// the query. A 504 is UNKNOWN; its duplicate gets 409 outcome-unknown
// without the query being asked, and the reconciler, which finds the
// route's query registered on the runtime, asks it of a record that holds
// no request ("the request was not stored"): the user's query is never
// called and the record is given up on. With the middleware around the
// route alone (the control) the duplicate's query answers 201.
func TestR31NestedPlacementLosesRouteQuery(t *testing.T) {
	for _, outer := range []bool{false, true} {
		name := "route-only"
		if outer {
			name = "mux-and-route"
		}
		for _, st := range teststores.All() {
			t.Run(name+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var asked, runs atomic.Int32
				q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
					asked.Add(1)
					return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charge 1")}, runtime.OutcomeSucceeded, nil
				}
				inner := idemhttp.Middleware(rt, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))
				mux := http.NewServeMux()
				mux.Handle("POST /pay/{id}", inner(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1) // the charge went out; its answer timed out
					w.WriteHeader(http.StatusGatewayTimeout)
				})))
				var h http.Handler = mux
				if outer {
					h = idemhttp.Middleware(rt)(mux)
				}
				var codes []int
				testenv.Within(t, 15*time.Second, func() {
					for range 2 {
						r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
						r.Header.Set("Idempotency-Key", "k-r31-nested-query")
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						codes = append(codes, w.Code)
					}
				})
				rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1))
				if err != nil {
					t.Fatal(err)
				}
				var stats runtime.ReconcileStats
				testenv.Within(t, 15*time.Second, func() { stats, err = rec.RunOnce(context.Background()) })
				t.Logf("answers %v, handler runs %d, query asked %d, reconcile pass %+v %v", codes, runs.Load(), asked.Load(), stats, err)
				if asked.Load() == 0 || codes[1] != http.StatusCreated {
					t.Fatalf("the route's query was asked %d times (answers %v, reconcile pass %+v): want the duplicate of the 504 to ask it and get its 201", asked.Load(), codes, stats)
				}
			})
		}
	}
}

// The passthrough compares identities, not runtimes. A route wrapped with
// the middleware on a shared store (PostgreSQL or Redis: two instances of
// the service share it), inside a service-wide middleware whose runtime is
// another (a per-process memory store): the inner one passes through
// whenever the outer one holds the same identity, so the shared store never
// sees the key. A retry that reaches the second instance is a new key to
// that instance's outer store, and the handler runs again. README.md:192-194:
// "the handler runs at most once per (scope, route as the client sees it,
// key)"; docs/http.md:22-27 (two placements). With the route's middleware
// alone (the control) the second instance replays.
func TestR31NestedPlacementOtherRuntimeRunsTwice(t *testing.T) {
	for _, outer := range []bool{false, true} {
		for _, st := range teststores.All()[1:] { // the shared stores
			name := "route-only/" + st.Name
			if outer {
				name = "per-process-outer/" + st.Name
			}
			t.Run(name, func(t *testing.T) {
				shared, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				route := idemhttp.Middleware(shared)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					w.WriteHeader(http.StatusCreated)
				}))
				instance := func() http.Handler { // one process of the service
					mux := http.NewServeMux()
					mux.Handle("POST /pay/{id}", route)
					if !outer {
						return mux
					}
					local, err := runtime.New(memstore.New())
					if err != nil {
						t.Fatal(err)
					}
					return idemhttp.Middleware(local)(mux)
				}
				instances := []http.Handler{instance(), instance()}
				key := "k-r31-other-rt-" + teststores.Unique()
				var codes []int
				testenv.Within(t, 15*time.Second, func() {
					for _, h := range instances { // the retry reaches the other instance
						r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
						r.Header.Set("Idempotency-Key", key)
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						codes = append(codes, w.Code)
					}
				})
				t.Logf("answers %v, handler runs %d", codes, runs.Load())
				if runs.Load() != 1 {
					t.Fatalf("one key sent to two instances sharing the route's store: answers %v, handler runs %d; want 1", codes, runs.Load())
				}
			})
		}
	}
}

type r31Case struct {
	name string
	mw   bool
	st   teststores.Store
}

// r31PayMux is a ServeMux with the route POST /pay/{id} (201), behind the
// middleware on a store of st when withMiddleware, and its handler's runs.
func r31PayMux(t *testing.T, st teststores.Store, withMiddleware bool) (http.Handler, *atomic.Int32) {
	t.Helper()
	rt, err := runtime.New(st.New(t))
	if err != nil {
		t.Fatal(err)
	}
	runs := new(atomic.Int32)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay/{id}", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	if !withMiddleware {
		return mux, runs
	}
	return idemhttp.Middleware(rt)(mux), runs
}

// r31Cases: the mux bare (the control, memory store) and with the
// middleware on every store.
func r31Cases() []r31Case {
	out := []r31Case{{"bare", false, teststores.Store{Name: "memory", New: teststores.Memory}}}
	for _, st := range teststores.All() {
		out = append(out, r31Case{"middleware/" + st.Name, true, st})
	}
	return out
}
