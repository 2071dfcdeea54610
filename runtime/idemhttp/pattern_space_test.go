package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// A ServeMux pattern may hold spaces in its path ("POST
// api.example/charges/ch_1 as sent"): named as written, it spelled the name
// of a route no pattern pins, and the plain handler of another middleware
// on the same runtime, reached as POST api.example/charges/ch_1, shared its
// identity (the same key got 422, the handler never ran). A pattern's path
// now goes into the name with its spaces escaped. Found by review r43.
func TestPatternWithSpacesNeverSpellsAsSent(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var ranA, ranB atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST api.example/charges/ch_1 as sent", func(w http.ResponseWriter, r *http.Request) {
		ranA.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	a := idemhttp.Middleware(rt, quiet())(mux)
	b := idemhttp.Middleware(rt, quiet())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ranB.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	for _, tc := range []struct {
		h      http.Handler
		target string
		ran    *atomic.Int32
	}{
		{a, "http://api.example/charges/ch_1%20as%20sent", &ranA},
		{b, "http://api.example/charges/ch_1", &ranB},
	} {
		req := httptest.NewRequest(http.MethodPost, tc.target, nil)
		req.Header.Set(idemhttp.DefaultHeader, "k1")
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated || tc.ran.Load() != 1 {
			t.Fatalf("%s: %d %s (its handler ran %d times); want 201 from its own run", tc.target, rec.Code, rec.Body, tc.ran.Load())
		}
	}
}
