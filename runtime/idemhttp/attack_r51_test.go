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

// docs/http.md answer table: "the request's context ended because a
// placement of the middleware (an interceptor) around this one could not
// confirm its lease and stopped its handler (the context's cause is
// ErrLeaseLost) | 409 in-progress". Schedule: the route's placement (shared
// store, with a query) holds an UNKNOWN record (the handler answered 504);
// the retry comes through a per-process outer placement whose renewals
// fail; the route's placement asks its query inline, which waits on the
// downstream until its context ends; the outer lease rule stops it.
func TestR51OuterLeaseRuleDuringInlineQuery(t *testing.T) {
	for _, returnsCause := range []bool{false, true} {
		name := "ctx.Err"
		if returnsCause {
			name = "context.Cause"
		}
		t.Run(name, func(t *testing.T) {
			shared, err := runtime.New(memstore.New(), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var runs, asked atomic.Int32
			var answer atomic.Bool // the downstream knows: charged
			q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				asked.Add(1)
				if answer.Load() {
					return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged")}, runtime.OutcomeSucceeded, nil
				}
				<-ctx.Done()
				if returnsCause {
					return idemhttp.Response{}, runtime.OutcomeUnknown, context.Cause(ctx)
				}
				return idemhttp.Response{}, runtime.OutcomeUnknown, ctx.Err()
			}
			route := idemhttp.Middleware(shared, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					w.WriteHeader(http.StatusGatewayTimeout)
				}))
			mux := http.NewServeMux()
			mux.Handle("POST /pay/{id}", route)
			stalled, err := runtime.New(teststores.NoRenewals{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			healthy, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			key := "k-r51-q-" + teststores.Unique()
			send := func(h http.Handler) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			testenv.Within(t, 15*time.Second, func() {
				w := send(idemhttp.Middleware(healthy)(mux))
				if w.Code != http.StatusGatewayTimeout {
					t.Errorf("first: %d", w.Code)
				}
				w = send(idemhttp.Middleware(stalled)(mux))
				t.Logf("retry behind the stalled outer placement: %d %s (query asked %d)", w.Code, strings.TrimSpace(w.Body.String()), asked.Load())
				// docs/http.md: the first row that matches answers: a query
				// that returns ctx.Err() leaves the call UNKNOWN.
				want := "#outcome-unknown"
				if returnsCause {
					want = "#in-progress"
				}
				if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), want) {
					t.Errorf("a request whose outer placement's lease rule stopped the route's inline query: %d %s, want 409 %s", w.Code, w.Body.String(), want)
				}
				answer.Store(true)
				w = send(idemhttp.Middleware(healthy)(mux))
				if w.Code != http.StatusCreated || w.Body.String() != "charged" {
					t.Errorf("retry after the downstream answers: %d %q, want 201 charged", w.Code, w.Body.String())
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}
