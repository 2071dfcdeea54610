package idemhttp_test

import (
	"context"
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
	"github.com/idemkit/idem/runtime/memstore"
)

// TestR37InProcessCloneOtherTargetReleasesOuterRecord: docs/http.md, "A
// request the handler makes itself in-process, on the request's context, is
// its own whatever it shares with the client's (a clone, the body handed
// on): to another target, even with the client's key, ... it leaves the
// outer record the handler's", where a target is "path and query". The
// handler clones its request (r.Clone) and sends it, with the client's key,
// to a route on another store, changing only the query (same path), or
// only URL.Path where the client's path had an escape (url.URL's RawPath
// is then stale). The clone keeps the client's RequestURI, which original()
// trusted whenever the clone's path was a suffix of it, whatever the query,
// and escapedPath read the stale RawPath: the inner placement named the
// clone by the client's target, deferred, the outer placement released its
// record, and the retry ran the handler (placed the order) again. (A clone
// whose path is a suffix of the client's, /v1/orders to /orders, is what
// http.StripPrefix leaves too: docs/http.md lists it as a limit.)
func TestR37InProcessCloneOtherTargetReleasesOuterRecord(t *testing.T) {
	cases := []struct {
		name   string
		target string // what the client sends
		clone  func(r *http.Request) *http.Request
	}{
		{"same-path-other-query", "/orders", func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.RawQuery = "entry=ledger"
			return sub
		}},
		{"same-path-query-changed", "/orders?item=1", func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.RawQuery = "audit=1"
			return sub
		}},
		{"stale-rawpath", "/orders/a%2Fb", func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.Path = "/ledger/entries" // RawPath left as the client's: url.URL ignores it now
			return sub
		}},
	}
	for _, c := range cases {
		for _, st := range teststores.All() {
			t.Run(c.name+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				other, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				var outerRuns, innerRuns atomic.Int32
				ledger := idemhttp.Middleware(other)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					innerRuns.Add(1)
					io.Copy(io.Discard, r.Body)
					w.WriteHeader(http.StatusCreated)
				}))
				h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					outerRuns.Add(1) // the order is placed: the effect
					sw := httptest.NewRecorder()
					ledger.ServeHTTP(sw, c.clone(r)) // the client's key handed on
					w.WriteHeader(http.StatusCreated)
					w.Write([]byte("order placed"))
				}))
				key := "k-r37-clone-" + teststores.Unique()
				testenv.Within(t, 15*time.Second, func() {
					for i := range 2 {
						r := httptest.NewRequest("POST", c.target, strings.NewReader(`{"item":1}`))
						r.Header.Set("Idempotency-Key", key)
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						if w.Code != http.StatusCreated || w.Body.String() != "order placed" {
							t.Errorf("attempt %d: %d %q", i, w.Code, w.Body.String())
						}
						if i == 1 && w.Header().Get("Idempotent-Replayed") != "true" {
							t.Errorf("the retry was not replayed (Idempotent-Replayed %q)", w.Header().Get("Idempotent-Replayed"))
						}
					}
				})
				if outerRuns.Load() != 1 {
					t.Errorf("the handler (placing the order) ran %d times for one key, want 1; the route it calls ran %d", outerRuns.Load(), innerRuns.Load())
				}
			})
		}
	}
}

// TestR37RewriteMovingPathPartKeepsItInScope: review r37 found that a
// rewriter in front of the middleware that maps the client's
// /tenants/{t}/orders/new to the internal /orders/create (the tenant moved
// to a header) made two tenants' requests with one key one request. Row
// 25.50's first fix named such a request by the client's path again; review
// r38 showed that a request a handler derives from its own cannot be told
// from it, and that naming it by the entry request's path ran one capture
// twice and lost another. docs/http.md now says a rewritten request is
// named by the path the rewrite leaves, and that a rewrite which moves a
// part of the path elsewhere keeps it in the identity with Scope(func) or
// Operation(func): so done, tenant b's request is a run of its own.
func TestR37RewriteMovingPathPartKeepsItInScope(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders/create", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("order for tenant " + r.Header.Get("X-Tenant")))
			})
			h := idemhttp.Middleware(rt, idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(mux)
			rewriter := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// /tenants/{t}/orders/new -> /orders/create, X-Tenant: t
				parts := strings.Split(r.URL.Path, "/")
				if len(parts) == 5 && parts[1] == "tenants" && parts[3] == "orders" && parts[4] == "new" {
					r.Header.Set("X-Tenant", parts[2])
					r.URL.Path = "/orders/create"
				}
				h.ServeHTTP(w, r)
			})
			key := "k-r37-rewrite-" + teststores.Unique()
			testenv.Within(t, 15*time.Second, func() {
				for _, tenant := range []string{"a", "b", "a"} {
					r := httptest.NewRequest("POST", "/tenants/"+tenant+"/orders/new", strings.NewReader(`{"item":1}`))
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					rewriter.ServeHTTP(w, r)
					if w.Code != http.StatusCreated || w.Body.String() != "order for tenant "+tenant {
						t.Errorf("tenant %s: %d %q", tenant, w.Code, w.Body.String())
					}
				}
				if n := runs.Load(); n != 2 {
					t.Errorf("the handler ran %d times for tenants a, b and a's retry, want 2", n)
				}
			})
		})
	}
}

// TestR37DerivedRequestStaleRawPathNamedByClientRoute: docs/http.md: a
// request the handler makes itself in-process "is named by its own URL: a
// clone keeps the client's RequestURI and r.Pattern, which count only
// while the URL's path is the one they describe". The handler of POST
// /orders/{id} clones its request for the ledger route with a key of its
// own, setting URL.Path as most code does; the client's path had an escape
// (/orders/a%2Fb), so url.URL kept a RawPath, now stale (url.URL itself
// ignores it: EscapedPath is /ledger/e1). The middleware reads the stale
// RawPath as the path it sees, finds it equal to RequestURI's, and names
// the ledger request by the client's path: its record is filed under the
// client's route, not /ledger/e1.
func TestR37DerivedRequestStaleRawPathNamedByClientRoute(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			ledgerStore := st.New(t)
			ledgerRT, err := runtime.New(ledgerStore)
			if err != nil {
				t.Fatal(err)
			}
			lister, ok := ledgerStore.(runtime.Lister)
			if !ok {
				t.Skip("store lists nothing")
			}
			ledger := idemhttp.Middleware(ledgerRT)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			key := "entry-" + teststores.Unique()
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
				sub := r.Clone(r.Context())
				sub.URL.Path = "/ledger/e1" // RawPath left as it was: url.URL ignores it now
				sub.Header.Set("Idempotency-Key", key)
				sub.Body = io.NopCloser(strings.NewReader(`{"cents":100}`))
				ledger.ServeHTTP(httptest.NewRecorder(), sub)
				w.WriteHeader(http.StatusCreated)
			})
			h := idemhttp.Middleware(local)(mux)
			testenv.Within(t, 15*time.Second, func() {
				r := httptest.NewRequest("POST", "/orders/a%2Fb", strings.NewReader(`{"item":1}`))
				r.Header.Set("Idempotency-Key", "k-derived-"+teststores.Unique())
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					t.Errorf("the order: %d %q", w.Code, w.Body.String())
				}
				recs, err := lister.List(context.Background(), runtime.ListParams{States: []runtime.State{runtime.StateProcessing, runtime.StateSuccess, runtime.StateFailed, runtime.StateUnknown}, Limit: 10})
				if err != nil {
					t.Error(err)
					return
				}
				var got []runtime.Identity
				for _, rec := range recs {
					got = append(got, rec.ID)
				}
				if len(recs) != 1 || recs[0].ID.Key != key || !strings.Contains(recs[0].ID.Operation, "/ledger/e1") || strings.Contains(recs[0].ID.Operation, "orders") {
					t.Errorf("the ledger route's records: %+v, want one at /ledger/e1 with key %s", got, key)
				}
			})
		})
	}
}
