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
