package idemhttp_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestPanicNilHandler: under GODEBUG=panicnil=1 (the default of a main
// module whose go.mod says go 1.20 or older) a handler that panics with
// nil after writing part of its response panicked: the key is released
// and the retry runs the handler again, never replayed the half response
// as a success.
func TestPanicNilHandler(t *testing.T) {
	testenv.SetPanicNil(t)
	hs := newHarness(t, memstore.New(), []runtime.Option{runtime.WithRecoverPanics(true)}, func(hs *harness) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) {
			if n := hs.runs.Add(1); n == 1 {
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"half":`))
				panic(nil)
			} else {
				charge(w, r, n)
			}
		})
		return mux
	})
	// An outer recoverer (the re-raised panic is nil: told by the
	// handler not returning).
	outer := hs.Config.Handler
	hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		returned := false
		defer func() {
			if !returned {
				recover()
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		outer.ServeHTTP(w, r)
		returned = true
	})
	first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	retry := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	if retry.status != http.StatusCreated || hs.runs.Load() != 2 {
		t.Fatalf("first %d %q; retry %d %q (runs %d): want the key released and the handler run again",
			first.status, first.body, retry.status, retry.body, hs.runs.Load())
	}
}
