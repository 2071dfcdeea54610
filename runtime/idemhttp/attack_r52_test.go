package idemhttp_test

import (
	"context"
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

// docs/http.md answer table (rows read from the top) and "neither is final,
// and the handler does not run again". Schedule: the route's placement
// (shared store, with a query) holds an UNKNOWN record (504); the retry
// comes through a per-process outer placement whose renewals fail; the
// route's inline query says "did not happen", so the route's placement runs
// the handler, which the outer lease rule then stops (or which ignores it).
// A third request through a healthy placement must get the real outcome,
// and the handler must have run twice in all (once per "did not happen").
func TestR52OuterLeaseRuleAfterQueryNotHappened(t *testing.T) {
	for _, mode := range []string{"honours", "ignores"} {
		t.Run(mode, func(t *testing.T) {
			shared, err := runtime.New(memstore.New(), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var runs, asked atomic.Int32
			var charged atomic.Bool
			q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				asked.Add(1)
				if charged.Load() {
					return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged")}, runtime.OutcomeSucceeded, nil
				}
				return idemhttp.Response{}, runtime.OutcomeNotHappened, nil
			}
			route := idemhttp.Middleware(shared, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					if n == 1 {
						w.WriteHeader(http.StatusGatewayTimeout)
						return
					}
					if mode == "honours" {
						<-r.Context().Done()
						w.WriteHeader(http.StatusGatewayTimeout)
						return
					}
					time.Sleep(600 * time.Millisecond)
					charged.Store(true)
					w.WriteHeader(http.StatusCreated)
					w.Write([]byte("charged"))
				}))
			mux, stalled, healthy, send := r52Placements(t, route)
			testenv.Within(t, 15*time.Second, func() {
				w := send(idemhttp.Middleware(healthy)(mux))
				if w.Code != http.StatusGatewayTimeout {
					t.Errorf("first: %d", w.Code)
				}
				w = send(idemhttp.Middleware(stalled)(mux))
				t.Logf("retry behind the stalled outer placement: %d %s (query asked %d, runs %d)", w.Code, strings.TrimSpace(w.Body.String()), asked.Load(), runs.Load())
				if w.Code == 499 || w.Code == http.StatusUnprocessableEntity {
					t.Errorf("retry behind the stalled outer placement: %d %s: final or the caller's own cancellation", w.Code, w.Body.String())
				}
				if mode == "ignores" && w.Code != http.StatusCreated {
					t.Errorf("the handler ran and answered 201; the request got %d %s", w.Code, w.Body.String())
				}
				charged.Store(true)
				for i := 0; i < 3; i++ {
					w = send(idemhttp.Middleware(healthy)(mux))
					t.Logf("later retry %d: %d %q replayed=%q", i, w.Code, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
					if w.Code != http.StatusConflict {
						break
					}
					time.Sleep(400 * time.Millisecond)
				}
				if w.Code != http.StatusCreated || w.Body.String() != "charged" {
					t.Errorf("retry after the downstream answers: %d %q, want 201 charged", w.Code, w.Body.String())
				}
			})
			if n := runs.Load(); n != 2 {
				t.Errorf("the handler ran %d times, want 2", n)
			}
		})
	}
}

// docs/http.md answer table: "the request's context ended because a
// placement of the middleware (an interceptor) around this one could not
// confirm its lease and stopped its handler (the context's cause is
// ErrLeaseLost) | 409 in-progress"; rows read from the top, so never the
// "request's or caller's own context ended ... 499 canceled" row.
// Schedule: the first request holds the route's record (its handler blocks);
// a retry comes through a stalled outer placement and waits (MaxWait 5 s) on
// the first; the outer lease rule stops it while it waits.
func TestR52OuterLeaseRuleWhileWaitingOnDuplicate(t *testing.T) {
	shared, err := runtime.New(memstore.New(), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var runs atomic.Int32
	route := idemhttp.Middleware(shared)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("charged"))
	}))
	mux, stalled, healthy, send := r52Placements(t, route)
	testenv.Within(t, 15*time.Second, func() {
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- send(idemhttp.Middleware(healthy)(mux)) }()
		for runs.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		w := send(idemhttp.Middleware(stalled)(mux))
		t.Logf("retry behind the stalled outer placement: %d %s", w.Code, strings.TrimSpace(w.Body.String()))
		if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "in-progress") {
			t.Errorf("a request whose outer placement's lease rule stopped it while it waited: %d %s, want 409 in-progress", w.Code, w.Body.String())
		}
		close(release)
		if w := <-first; w.Code != http.StatusCreated {
			t.Errorf("first: %d", w.Code)
		}
		w = send(idemhttp.Middleware(healthy)(mux))
		if w.Code != http.StatusCreated || w.Body.String() != "charged" {
			t.Errorf("later retry: %d %q", w.Code, w.Body.String())
		}
	})
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// r52Placements serves route at POST /pay/{id} and returns the mux, two
// outer per-process runtimes (stalled: its renewals go unanswered, lease
// 300 ms; healthy), and send, which POSTs one request under a fresh key
// (the same for every send) through h.
func r52Placements(t *testing.T, route http.Handler) (mux *http.ServeMux, stalled, healthy *runtime.Runtime, send func(h http.Handler) *httptest.ResponseRecorder) {
	t.Helper()
	mux = http.NewServeMux()
	mux.Handle("POST /pay/{id}", route)
	stalled, err := runtime.New(teststores.NoRenewals{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	healthy, err = runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	key := "k-r52-" + teststores.Unique()
	send = func(h http.Handler) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	return mux, stalled, healthy, send
}
