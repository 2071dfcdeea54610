package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/testerrs"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// README: "'Anywhere' is every error of the tree, however wide (...) or
// deep, each visited once"; "Both adapters take a 'did it happen?' query
// ... and answer every error runtime.Do can return as what it is".
// Schedule: the first request's handler answers 504 (UNKNOWN); the
// duplicate's inline query errs with a fan-out error whose sub-lookups
// share a cause (64 levels, 65 distinct errors).
func TestR49HTTPQueryErrorSharedSubtree(t *testing.T) {
	qerr := testerrs.SharedDAG(64, errors.New("ledger unavailable"))
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		r49WantOutcomeUnknown(t, r49Duplicate(t, rt, qerr))
	})
}

// README: "5xx and panics release the key, except what may have had its
// effect: a 504, or a 5xx written after the request's context ended, is
// UNKNOWN, never run again." docs/http.md: "504 Gateway Timeout: the
// handler says a downstream did not answer in time; the downstream may
// well have acted" (UNKNOWN "whatever the runtime's error policy").
// Schedule: the handler writes a 504 and flushes it (streams).
func TestR49HTTPStreamed504NeverRunAgain(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		for _, how := range []string{"flusher", "controller"} {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Error(err)
				return
			}
			runs := 0
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.WriteHeader(http.StatusGatewayTimeout)
				_, _ = w.Write([]byte("gateway timed out"))
				if how == "flusher" {
					w.(http.Flusher).Flush()
				} else {
					_ = http.NewResponseController(w).Flush()
				}
			})
			h := idemhttp.Middleware(rt)(mux)
			var codes []int
			for range 2 {
				req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", "r49-s1")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				codes = append(codes, rec.Code)
			}
			t.Logf("%s: answers %v, handler runs %d", how, codes, runs)
			if runs != 1 {
				t.Errorf("%s: a streamed 504 released the key: the handler ran %d times", how, runs)
			}
		}
	})
}

// Same promise; the handler sends 103 Early Hints before its answer (a
// 504, or a 503 after its context ended).
func TestR49HTTPEarlyHintsThen504(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		for _, final := range []int{http.StatusGatewayTimeout, http.StatusCreated, http.StatusUnprocessableEntity} {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Error(err)
				return
			}
			runs := 0
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(final)
				_, _ = w.Write([]byte("answer"))
			})
			h := idemhttp.Middleware(rt)(mux)
			var got []string
			for range 2 {
				req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", "r49-e1")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				got = append(got, fmt.Sprintf("%d %q replayed=%q", rec.Code, rec.Body.String(), rec.Header().Get("Idempotent-Replayed")))
			}
			t.Logf("final %d: answers %v, handler runs %d", final, got, runs)
			if runs != 1 {
				t.Errorf("final %d after 103: the handler ran %d times", final, runs)
			}
		}
	})
}

// docs/http.md, "Each adapter's answer for every runtime error":
// ErrOutcomeUnknown -> "409 outcome-unknown, Retry-After: 5". README: "an
// error whose Error method panics is recorded with a note saying so (also
// when its Unwrap or Is panics ...)".
// Schedule: the first request answers 504 (UNKNOWN); the duplicate's
// inline query cannot tell, with an error whose Is panics.
func TestR49HTTPQueryErrorIsPanics(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		r49WantOutcomeUnknown(t, r49Duplicate(t, rt, &testerrs.NilIs{}))
	})
}

// r49Duplicate sends POST /charges twice with one key through the
// middleware on rt, the handler answering 504 (UNKNOWN), the route's query
// erring with qerr, and returns the second answer (the duplicate's); a
// panic of the middleware's (net/http drops the connection: no answer)
// fails t.
func r49Duplicate(t *testing.T, rt *runtime.Runtime, qerr error) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGatewayTimeout) })
	h := idemhttp.Middleware(rt, idemhttp.Query("POST /charges", func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
		return idemhttp.Response{}, runtime.OutcomeUnknown, qerr
	}, runtime.QueryOptions{}))(mux)
	key := "r49-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var rec *httptest.ResponseRecorder
	for i := range 2 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("request %d: the middleware panicked (net/http drops the connection, no answer): %v\n%s", i, p, testerrs.Frames())
				}
			}()
			req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
			req.Header.Set("Idempotency-Key", key)
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, req)
		}()
	}
	return rec
}

// r49WantOutcomeUnknown fails t unless rec is docs/http.md's answer to
// ErrOutcomeUnknown: 409 outcome-unknown, Retry-After: 5.
func r49WantOutcomeUnknown(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "#outcome-unknown") || rec.Header().Get("Retry-After") != "5" {
		t.Errorf("the duplicate got %d %s (Retry-After %q), want 409 outcome-unknown, Retry-After 5", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
}
