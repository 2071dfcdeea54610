package idemhttp_test

import (
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

// TestR35WrappedBodyBetweenPlacementsRecordsInFlight409: 25.45's placement
// (a per-process outer middleware around the mux, the route's own placement
// on the shared store), with the standard library's http.MaxBytesHandler
// between the mux and the route's placement, as services put a body limit
// on a route. MaxBytesHandler hands the inner placement the same request
// with its body wrapped, so the inner placement's r.Body is not the outer
// one's reader: it does not tell the outer one, which then records the
// inner placement's 409 in-progress and replays it (Idempotent-Replayed)
// after the first request ended.
//
// docs/http.md: "An inner placement on another store (a route's shared
// store behind a per-process outer middleware) claims the request in its
// own store as if it were alone, and its record is the request's: the
// outer one passes its answer to the client, records nothing for the
// request and releases its key".
func TestR35WrappedBodyBetweenPlacementsRecordsInFlight409(t *testing.T) {
	for _, st := range teststores.All()[1:] { // the shared stores
		t.Run(st.Name, func(t *testing.T) {
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
				mux := http.NewServeMux()
				mux.Handle("POST /pay/{id}", http.MaxBytesHandler(route, 1<<20))
				local, err := runtime.New(memstore.New(), runtime.WithMaxWait(100*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				return idemhttp.Middleware(local)(mux)
			}
			one, two := instance(), instance()
			key := "k-r35-wrapped-" + teststores.Unique()
			send := func(h http.Handler) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
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
				t.Logf("a retry while the first runs: %d (Idempotent-Replayed %q)", w.Code, w.Header().Get("Idempotent-Replayed"))
				close(release)
				if w := <-first; w.Code != http.StatusCreated {
					t.Errorf("the first request: %d %q, want 201", w.Code, w.Body.String())
				}
				w = send(two) // the next retry, after the first ended
				if w.Code != http.StatusCreated || w.Body.String() != "charged" {
					t.Errorf("a retry after the first ended: %d %q (Idempotent-Replayed %q), want the first request's 201",
						w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// TestR35InProcessCallSharingBodyReleasesOuterRecord: a handler behind the
// middleware makes its own request to another route in-process, on the
// request's context: built with r.Clone (net/http's way to derive a
// request; the clone shares r.Body) or with the request's body handed on
// to it. That request is the handler's own, to another route, and its
// placement claims it under that route's identity; yet the outer
// placement takes it for its own request (the same body reader), records
// nothing for its handler, which did its effect, and releases its key: the
// retry runs the handler again.
//
// docs/http.md: "This holds for the request itself only: a request the
// handler makes to another route in-process, on the request's context, is
// its own, and the outer record stays the handler's."
func TestR35InProcessCallSharingBodyReleasesOuterRecord(t *testing.T) {
	build := map[string]func(r *http.Request) *http.Request{
		"clone": func(r *http.Request) *http.Request {
			sub := r.Clone(r.Context())
			sub.URL.Path, sub.RequestURI = "/ledger/entries", "/ledger/entries"
			sub.Header.Set("Idempotency-Key", "entry-"+r.Header.Get("Idempotency-Key"))
			return sub
		},
		"body-handed-on": func(r *http.Request) *http.Request {
			sub, _ := http.NewRequestWithContext(r.Context(), "POST", "/ledger/entries", r.Body)
			sub.RequestURI = "/ledger/entries"
			sub.Header.Set("Idempotency-Key", "entry-"+r.Header.Get("Idempotency-Key"))
			return sub
		},
	}
	for _, how := range []string{"clone", "body-handed-on"} {
		for _, st := range teststores.All()[1:] {
			for _, placement := range []string{"other-store", "same-mux"} {
				t.Run(how+"/"+placement+"/"+st.Name, func(t *testing.T) {
					rt, err := runtime.New(st.New(t))
					if err != nil {
						t.Fatal(err)
					}
					var outerRuns, innerRuns atomic.Int32
					ledger := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						innerRuns.Add(1)
						io.Copy(io.Discard, r.Body)
						w.WriteHeader(http.StatusCreated)
					})
					mux := http.NewServeMux()
					var sub http.Handler // where the handler sends its own request
					h := idemhttp.Middleware(rt)(mux)
					if placement == "other-store" {
						other, err := runtime.New(memstore.New())
						if err != nil {
							t.Fatal(err)
						}
						sub = idemhttp.Middleware(other)(ledger)
					} else {
						mux.Handle("POST /ledger/entries", ledger)
						sub = h
					}
					mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
						outerRuns.Add(1) // the order is placed: the effect
						sw := httptest.NewRecorder()
						sub.ServeHTTP(sw, build[how](r))
						w.WriteHeader(http.StatusCreated)
						w.Write([]byte("order placed"))
					})
					key := "k-r35-inproc-" + teststores.Unique()
					testenv.Within(t, 15*time.Second, func() {
						for i := range 2 {
							r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":1}`))
							r.Header.Set("Idempotency-Key", key)
							w := httptest.NewRecorder()
							h.ServeHTTP(w, r)
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
	}
}
