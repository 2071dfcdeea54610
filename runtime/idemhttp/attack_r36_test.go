package idemhttp_test

import (
	"bufio"
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

// TestR36BetweenOuterAndMuxRecordsInFlight409: 25.45's placement (a
// per-process outer middleware around the service, the route's own
// placement on the shared store), with no Operation option on either side.
// docs/http.md says the inner placement knows the request as the outer
// one's by its operation and key, "so a middleware between the two that
// wraps the body (http.MaxBytesHandler, a decompressor) changes nothing",
// and lists "around sub-muxes mounted with http.StripPrefix" among the
// placements. But with a body-wrapping middleware between the outer
// placement and the mux (where a decompressor or a body limit usually
// goes), or with the route in a sub-mux mounted by StripPrefix, the outer
// placement cannot see the route's pattern and names the request "as
// sent": the inner one names it by the pattern, the two operations differ,
// the inner one does not defer, and the outer one records the inner one's
// 409 in-progress and replays it after the first request ended.
func TestR36BetweenOuterAndMuxRecordsInFlight409(t *testing.T) {
	cases := []struct {
		name  string
		build func(route http.Handler) http.Handler // the service below the outer placement
		path  string
	}{
		{"MaxBytesHandler-around-mux", func(route http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /pay/{id}", route)
			return http.MaxBytesHandler(mux, 1<<20)
		}, "/pay/ch_1"},
		{"decompressor-around-mux", func(route http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /pay/{id}", route)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// a decompressor's shape (identity coding here): the body
				// handed on through a reader of its own
				r.Body = io.NopCloser(bufio.NewReader(r.Body))
				mux.ServeHTTP(w, r)
			})
		}, "/pay/ch_1"},
		{"StripPrefix-sub-mux", func(route http.Handler) http.Handler {
			sub := http.NewServeMux()
			sub.Handle("POST /{id}", route)
			mux := http.NewServeMux()
			mux.Handle("/pay/", http.StripPrefix("/pay", sub))
			return mux
		}, "/pay/ch_1"},
	}
	for _, c := range cases {
		for _, st := range teststores.All()[1:] { // the shared stores
			t.Run(c.name+"/"+st.Name, func(t *testing.T) {
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
				instance := func() http.Handler { // one process of the service
					local, err := runtime.New(memstore.New(), runtime.WithMaxWait(100*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					return idemhttp.Middleware(local)(c.build(route))
				}
				one, two := instance(), instance()
				key := "k-r36-between-" + teststores.Unique()
				send := func(h http.Handler) *httptest.ResponseRecorder {
					r := httptest.NewRequest("POST", c.path, strings.NewReader(`{"cents":100}`))
					ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
					defer cancel()
					r = r.WithContext(ctx)
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w
				}
				testenv.Within(t, 15*time.Second, func() {
					first := make(chan *httptest.ResponseRecorder, 1)
					go func() { first <- send(one) }()
					<-started
					w := send(two) // the retry, on the other instance, while the first runs
					if w.Code < 400 || w.Header().Get("Idempotent-Replayed") != "" {
						t.Errorf("a retry while the first runs: %d %q (Idempotent-Replayed %q), want an error not replayed",
							w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
					}
					close(release)
					if w := <-first; w.Code != http.StatusCreated {
						t.Errorf("the first request: %d %q, want 201", w.Code, w.Body.String())
					}
					w = send(two) // the next retry, after the first ended
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

// TestR36InProcessCloneWithClientKeyReleasesOuterRecord: docs/http.md: "A
// request the handler makes itself in-process, on the request's context, is
// its own whatever it shares with the client's (a clone, the body handed
// on): to another route, even with the client's key, ... it leaves the
// outer record the handler's." The handler clones its request (r.Clone)
// for another route, hands the client's key on, and calls that route's
// placement on another store. The clone keeps what r.Clone copies: r.Pattern
// (set by the outer ServeMux) and, when the handler only changes URL.Path,
// r.RequestURI. The inner placement names the clone by those, the outer
// route's operation, defers, and the outer placement releases its record:
// the retry places the order again.
func TestR36InProcessCloneWithClientKeyReleasesOuterRecord(t *testing.T) {
	cases := []struct {
		name   string
		router func(orders http.HandlerFunc) http.Handler // what the outer placement wraps
		clone  func(r *http.Request) *http.Request
	}{
		{"servemux/clone-keeps-pattern", func(orders http.HandlerFunc) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders", orders)
			return mux
		}, func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.Path, sub.RequestURI = "/ledger/entries", "/ledger/entries"
			return sub
		}},
		{"hand-written-router/clone-keeps-requesturi", func(orders http.HandlerFunc) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/orders":
					orders(w, r)
				default:
					http.NotFound(w, r)
				}
			})
		}, func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.Path = "/ledger/entries"
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
				h := idemhttp.Middleware(rt)(c.router(func(w http.ResponseWriter, r *http.Request) {
					outerRuns.Add(1) // the order is placed: the effect
					sw := httptest.NewRecorder()
					ledger.ServeHTTP(sw, c.clone(r)) // the client's key handed on
					w.WriteHeader(http.StatusCreated)
					w.Write([]byte("order placed"))
				}))
				key := "k-r36-clone-" + teststores.Unique()
				testenv.Within(t, 15*time.Second, func() {
					for i := range 2 {
						r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":1}`))
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

// TestR36TwoPlacementsOneRuntimeUnknownNeverConverges: the same
// root cause on one runtime and one store. docs/http.md: "In two places at
// once (around the mux and around a route), the outer one handles the
// request and the inner one passes it through ... the outer one then runs
// the call with the route's query whichever placement was given it, when
// both are on one runtime", and the middleware may sit "around sub-muxes
// mounted with http.StripPrefix"; "a middleware between the two that wraps
// the body (http.MaxBytesHandler, ...) changes nothing". With the route in
// a sub-mux mounted by StripPrefix, or http.MaxBytesHandler between the
// outer placement and the mux (direct-control: neither), the two name
// the request differently: the outer one claims "… as sent via /pay/",
// with no query (none can be registered for it), the inner one claims the
// route's own record. The handler's 504 is UNKNOWN in both; the reconciler
// converges the route's record, and the outer record stays UNKNOWN: every
// retry gets 409 outcome-unknown.
func TestR36TwoPlacementsOneRuntimeUnknownNeverConverges(t *testing.T) {
	for _, mount := range []string{"direct-control", "StripPrefix", "MaxBytesHandler-around-mux"} {
		for _, st := range teststores.All() {
			t.Run(mount+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var runs, asked atomic.Int32
				q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
					asked.Add(1)
					return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged")}, runtime.OutcomeSucceeded, nil
				}
				route := idemhttp.Middleware(rt, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						runs.Add(1) // the charge went out; the gateway's answer timed out
						w.WriteHeader(http.StatusGatewayTimeout)
					}))
				mux := http.NewServeMux()
				if mount == "StripPrefix" {
					sub := http.NewServeMux()
					sub.Handle("POST /{id}", route)
					mux.Handle("/pay/", http.StripPrefix("/pay", sub))
				} else { // the control: the route in the mux the outer placement wraps
					mux.Handle("POST /pay/{id}", route)
				}
				var below http.Handler = mux
				if mount == "MaxBytesHandler-around-mux" {
					below = http.MaxBytesHandler(mux, 1<<20)
				}
				h := idemhttp.Middleware(rt)(below)
				key := "k-r36-strip-unknown-" + teststores.Unique()
				send := func() *httptest.ResponseRecorder {
					r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w
				}
				testenv.Within(t, 15*time.Second, func() {
					if w := send(); w.Code != http.StatusGatewayTimeout {
						t.Errorf("the first request: %d, want the handler's 504", w.Code)
					}
					rec, err := runtime.NewReconciler(rt)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := rec.RunOnce(context.Background()); err != nil {
						t.Errorf("reconcile: %v", err)
					}
					w := send()
					if w.Code != http.StatusCreated || w.Body.String() != "charged" {
						t.Errorf("a retry after the reconciler ran: %d %q (query asked %d times), want the converged 201", w.Code, w.Body.String(), asked.Load())
					}
				})
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want 1", n)
				}
			})
		}
	}
}
