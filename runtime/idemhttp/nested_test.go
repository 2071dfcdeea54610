package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

// TestNestedPlacementInFlightAnswerNotRecorded: a route on a shared store
// behind a per-process outer middleware (docs/http.md: the inner placement
// "claims the request in its own store as if it were alone"). A retry that
// reaches the other instance while the first request still runs gets 409
// in-progress from the inner placement. That answer is the middleware's,
// not the handler's: the outer placement must not record it (it would be
// replayed, Idempotent-Replayed: true, which clients never retry, for the
// outer store's TTL), and the retry after the first request ended gets its
// response.
func TestNestedPlacementInFlightAnswerNotRecorded(t *testing.T) {
	for _, layout := range nestedLayouts {
		for _, deadline := range []bool{false, true} {
			for _, st := range teststores.All()[1:] { // the shared stores
				name := layout + "/in-progress/" + st.Name
				if deadline {
					name = layout + "/deadline-ends-while-waiting/" + st.Name
				}
				t.Run(name, func(t *testing.T) {
					shared, err := runtime.New(st.New(t), runtime.WithMaxWait(100*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					var runs atomic.Int32
					started, release := make(chan struct{}), make(chan struct{})
					route := idemhttp.Middleware(shared)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if runs.Add(1) == 1 {
							close(started)
							<-release
						}
						w.WriteHeader(http.StatusCreated)
						w.Write([]byte("charged"))
					}))
					instance := func() (http.Handler, string) { // one process of the service
						local, err := runtime.New(memstore.New(), runtime.WithMaxWait(100*time.Millisecond))
						if err != nil {
							t.Fatal(err)
						}
						h, path := nestedInstance(layout, route)
						return idemhttp.Middleware(local)(h), path
					}
					one, path := instance()
					two, _ := instance()
					key := "k-nested-inflight-" + teststores.Unique()
					send := func(h http.Handler, timeout time.Duration) *httptest.ResponseRecorder {
						r := httptest.NewRequest("POST", path, strings.NewReader(`{"cents":100}`))
						ctx, cancel := context.WithTimeout(r.Context(), timeout)
						defer cancel()
						r = r.WithContext(ctx)
						r.Header.Set("Idempotency-Key", key)
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						return w
					}
					testenv.Within(t, 15*time.Second, func() {
						first := make(chan *httptest.ResponseRecorder, 1)
						go func() { first <- send(one, 10*time.Second) }()
						<-started
						timeout := 10 * time.Second
						if deadline {
							timeout = 50 * time.Millisecond // under MaxWait
						}
						w := send(two, timeout) // the retry, on the other instance
						if w.Code < 400 || w.Header().Get("Idempotent-Replayed") != "" {
							t.Errorf("a retry while the first runs: %d %q (Idempotent-Replayed %q), want an error not replayed",
								w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
						}
						close(release)
						if w := <-first; w.Code != http.StatusCreated {
							t.Errorf("the first request: %d %q, want 201", w.Code, w.Body.String())
						}
						w = send(two, 10*time.Second) // the next retry, after the first ended
						if w.Code != http.StatusCreated || w.Body.String() != "charged" || w.Header().Get("Idempotent-Replayed") != "true" {
							t.Errorf("a retry after the first ended: %d %q (Idempotent-Replayed %q), want its 201 replayed",
								w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
						}
					})
					if n := runs.Load(); n != 1 {
						t.Errorf("the handler ran %d times, want 1", n)
					}
				})
			}
		}
	}
}

// nestedLayouts are the ways a service puts a per-process placement
// outside the route's own one (nestedInstance): the outer placement must
// know the inner one's request as its own in each.
var nestedLayouts = []string{"around-the-mux", "around-a-wrapper", "body-limit-between", "stripprefix-mount"}

// nestedInstance returns what the outer placement wraps in layout, with
// route (the route's own placement) at "POST /pay/{id}", and the path a
// client sends for it:
//   - around-the-mux: the mux itself (the outer one names the route by its
//     pattern, as the inner one does);
//   - around-a-wrapper: a handler of the service's that calls the mux (a
//     logger): the outer one sees no mux and names the request by its
//     path, the inner one by the pattern;
//   - body-limit-between: http.MaxBytesHandler around the route, as
//     services limit a route's body: the inner one reads another reader;
//   - stripprefix-mount: the mux mounted under /api/ with http.StripPrefix
//     in a top mux.
func nestedInstance(layout string, route http.Handler) (http.Handler, string) {
	mux := http.NewServeMux()
	switch layout {
	case "body-limit-between":
		mux.Handle("POST /pay/{id}", http.MaxBytesHandler(route, 1<<20))
	default:
		mux.Handle("POST /pay/{id}", route)
	}
	switch layout {
	case "around-a-wrapper":
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) }), "/pay/ch_1"
	case "stripprefix-mount":
		top := http.NewServeMux()
		top.Handle("/api/", http.StripPrefix("/api", mux))
		return top, "/api/pay/ch_1"
	}
	return mux, "/pay/ch_1"
}

// TestNestedPlacementUnknownConvergesForOuter: the same placements (a
// per-process outer middleware, the route's on the shared store, with the
// route's query). The handler answers 504: the outcome is unknown, and the
// shared record is UNKNOWN until the reconciler (on the shared store, the
// only one with the query) converges it. The retry on the instance that
// served the 504 must then get the converged answer: an outer placement
// that recorded the 504 as UNKNOWN in its own store, where nothing
// converges it, answered 409 outcome-unknown until that store's TTL.
func TestNestedPlacementUnknownConvergesForOuter(t *testing.T) {
	for _, layout := range nestedLayouts[:3] { // the route's query is named by its pattern, which a mount changes
		for _, st := range teststores.All()[1:] { // the shared stores
			t.Run(layout+"/"+st.Name, func(t *testing.T) {
				shared, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var runs, asked atomic.Int32
				q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
					asked.Add(1)
					return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged")}, runtime.OutcomeSucceeded, nil
				}
				route := idemhttp.Middleware(shared, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						runs.Add(1) // the charge went out; the gateway's answer timed out
						w.WriteHeader(http.StatusGatewayTimeout)
					}))
				local, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				h, path := nestedInstance(layout, route)
				instance := idemhttp.Middleware(local)(h)
				key := "k-nested-unknown-" + teststores.Unique()
				send := func() *httptest.ResponseRecorder {
					r := httptest.NewRequest("POST", path, strings.NewReader(`{"cents":100}`))
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					instance.ServeHTTP(w, r)
					return w
				}
				testenv.Within(t, 15*time.Second, func() {
					if w := send(); w.Code != http.StatusGatewayTimeout {
						t.Errorf("the first request: %d, want the handler's 504", w.Code)
					}
					rec, err := runtime.NewReconciler(shared)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := rec.RunOnce(context.Background()); err != nil {
						t.Errorf("reconcile: %v", err)
					}
					w := send()
					if w.Code != http.StatusCreated || w.Body.String() != "charged" {
						t.Errorf("a retry after the record converged: %d %q (query asked %d times), want the converged 201", w.Code, w.Body.String(), asked.Load())
					}
				})
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want 1", n)
				}
			})
		}
	}
}

// TestInProcessCallKeepsOuterRecord: a handler behind the middleware calls
// an idempotent route in-process (its own request, on the request's
// context), behind a placement on another store: another route with its
// own key or the client's, the same route with another key, or the same
// target and key with another method. That inner
// placement claims its own request, not this one (it names it otherwise):
// the outer record stays the handler's, and a retry is replayed, never run
// again.
func TestInProcessCallKeepsOuterRecord(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, key string // the handler's own request
	}{
		{"another route, another key", "POST", "/ledger/entries", "entry-k-in-process"},
		// The client's key handed on downstream.
		{"another route, the same key", "POST", "/ledger/entries", "k-in-process"},
		// A batch route that posts each item to itself.
		{"the same route, another key", "POST", "/orders", "item-k-in-process"},
		// The resource the POST created, updated in the same request.
		{"another method, the same target and key", "PUT", "/orders", "k-in-process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			other, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			var outerRuns, innerRuns atomic.Int32
			inner := idemhttp.Middleware(other)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				innerRuns.Add(1)
				w.WriteHeader(http.StatusCreated)
			}))
			outer := idemhttp.Middleware(local)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				outerRuns.Add(1)
				sub := httptest.NewRequestWithContext(r.Context(), tc.method, tc.path, strings.NewReader(`{"cents":100}`))
				sub.Header.Set("Idempotency-Key", tc.key)
				sw := httptest.NewRecorder()
				inner.ServeHTTP(sw, sub)
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("order placed"))
			}))
			testenv.Within(t, 15*time.Second, func() {
				for i := range 2 {
					r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":1}`))
					r.Header.Set("Idempotency-Key", "k-in-process")
					w := httptest.NewRecorder()
					outer.ServeHTTP(w, r)
					if w.Code != http.StatusCreated || w.Body.String() != "order placed" {
						t.Errorf("attempt %d: %d %q", i, w.Code, w.Body.String())
					}
				}
			})
			if outerRuns.Load() != 1 || innerRuns.Load() != 1 {
				t.Errorf("the handler ran %d times and the route it calls %d, want 1 and 1", outerRuns.Load(), innerRuns.Load())
			}
		})
	}
}

// TestDerivedRequestNamedByItsOwnRoute: a request the handler derives with
// r.Clone and sends in-process to another route keeps the r.Pattern and
// (unless the handler sets it) the RequestURI of the client's request.
// The placement of that route (behind a router that sets no pattern) names
// it by its own target, never by the copied pattern or RequestURI: the
// record is at /ledger/e1, not the client's POST /orders/{id}.
func TestDerivedRequestNamedByItsOwnRoute(t *testing.T) {
	for _, keepURI := range []bool{false, true} {
		t.Run(fmt.Sprintf("requesturi-kept=%v", keepURI), func(t *testing.T) {
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			otherStore := memstore.New()
			other, err := runtime.New(otherStore)
			if err != nil {
				t.Fatal(err)
			}
			ledger := idemhttp.Middleware(other)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
				sub := r.Clone(r.Context())
				sub.URL.Path = "/ledger/e1"
				if !keepURI {
					sub.RequestURI = "/ledger/e1"
				}
				sub.Header.Set("Idempotency-Key", "entry-1")
				sub.Body = io.NopCloser(strings.NewReader(`{"cents":100}`))
				ledger.ServeHTTP(httptest.NewRecorder(), sub)
				w.WriteHeader(http.StatusCreated)
			})
			h := idemhttp.Middleware(local)(mux)
			r := httptest.NewRequest("POST", "/orders/o1", strings.NewReader(`{"item":1}`))
			r.Header.Set("Idempotency-Key", "k-derived")
			h.ServeHTTP(httptest.NewRecorder(), r)
			recs, err := otherStore.List(context.Background(), runtime.ListParams{States: []runtime.State{runtime.StateProcessing, runtime.StateSuccess, runtime.StateFailed, runtime.StateUnknown}, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].ID.Key != "entry-1" || !strings.Contains(recs[0].ID.Operation, "/ledger/e1") || strings.Contains(recs[0].ID.Operation, "orders") {
				var got []runtime.Identity
				for _, rec := range recs {
					got = append(got, rec.ID)
				}
				t.Errorf("the ledger route's records: %+v, want one at /ledger/e1 with key entry-1", got)
			}
		})
	}
}

// TestNestedPlacementLogsNothing: two placements are a documented layout
// (docs/http.md), and the outer one's release of a request the inner one
// claimed is the design, not a record that failed: a service that follows
// the docs must not log a warning for every request.
func TestNestedPlacementLogsNothing(t *testing.T) {
	for _, layout := range nestedLayouts {
		t.Run(layout, func(t *testing.T) {
			var logged strings.Builder
			logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
			shared, err := runtime.New(memstore.New(), runtime.WithLogger(logger))
			if err != nil {
				t.Fatal(err)
			}
			local, err := runtime.New(memstore.New(), runtime.WithLogger(logger))
			if err != nil {
				t.Fatal(err)
			}
			route := idemhttp.Middleware(shared, idemhttp.Logger(logger))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			h, path := nestedInstance(layout, route)
			h = idemhttp.Middleware(local, idemhttp.Logger(logger))(h)
			for i := range 2 {
				r := httptest.NewRequest("POST", path, strings.NewReader(`{"cents":100}`))
				r.Header.Set("Idempotency-Key", "k-nested-log")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated || (i == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
					t.Errorf("request %d: %d (Idempotent-Replayed %q)", i, w.Code, w.Header().Get("Idempotent-Replayed"))
				}
			}
			if logged.Len() > 0 {
				t.Errorf("logged:\n%s", logged.String())
			}
		})
	}
}
