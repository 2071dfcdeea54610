package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// scopedCharges is a tenant-scoped downstream: the handler files a charge
// under its request's scope, and the route's query looks it up under the
// scope its StoredRequest and its context say.
type scopedCharges struct {
	mu      sync.Mutex
	charges map[string]string // scope + body -> charge id
	runs    int
	seen    []string // "req=<scope> ctx=<scope>" per query
}

func (c *scopedCharges) handler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.runs++
	id := fmt.Sprintf("ch_%d", c.runs)
	c.charges[runtime.ScopeFrom(r.Context())+"\x00"+string(b)] = id
	c.mu.Unlock()
	w.WriteHeader(http.StatusGatewayTimeout) // charged, the answer lost
}

func (c *scopedCharges) query(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fmt.Sprintf("req=%.20q ctx=%.20q", req.Scope, runtime.ScopeFrom(ctx)))
	if req.Scope != runtime.ScopeFrom(ctx) {
		return idemhttp.Response{}, runtime.OutcomeUnknown, fmt.Errorf("StoredRequest.Scope %q, the context's %q", req.Scope, runtime.ScopeFrom(ctx))
	}
	if id, ok := c.charges[req.Scope+"\x00"+string(req.Body)]; ok {
		return idemhttp.Response{Status: http.StatusCreated, Body: []byte(id)}, runtime.OutcomeSucceeded, nil
	}
	return idemhttp.Response{}, runtime.OutcomeNotHappened, nil
}

// A route's query, inline or in a reconciler, learns the scope the handler
// saw, whole (a scope over 255 bytes too), from StoredRequest.Scope and from
// its context: a 504 whose charge happened is found and replayed, never
// charged again.
func TestQuerySeesTheHandlersScope(t *testing.T) {
	for _, st := range teststores.All() {
		for _, long := range []bool{false, true} {
			for _, reconciler := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/long=%v/reconciler=%v", st.Name, long, reconciler), func(t *testing.T) {
					store := st.New(t)
					tenant := teststores.Unique()
					if long {
						tenant = "spiffe://example.org/" + strings.Repeat("ns/payments/", 25) + tenant
					}
					c := &scopedCharges{charges: map[string]string{}}
					mw := func(rt *runtime.Runtime) http.Handler {
						mux := http.NewServeMux()
						mux.HandleFunc("POST /charges", c.handler)
						return idemhttp.Middleware(rt,
							idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
							idemhttp.Query("POST /charges", c.query, runtime.QueryOptions{}),
						)(mux)
					}
					rt, err := runtime.New(store)
					if err != nil {
						t.Fatal(err)
					}
					srv := httptest.NewServer(mw(rt))
					defer srv.Close()
					post := func() (int, string) {
						r, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":7}`))
						r.Header.Set("Idempotency-Key", "k1")
						r.Header.Set("X-Tenant", tenant)
						resp, err := http.DefaultClient.Do(r)
						if err != nil {
							t.Fatal(err)
						}
						defer resp.Body.Close()
						b, _ := io.ReadAll(resp.Body)
						return resp.StatusCode, string(b)
					}
					if s, _ := post(); s != http.StatusGatewayTimeout {
						t.Fatalf("first: %d", s)
					}
					if reconciler {
						rrt, err := runtime.New(store)
						if err != nil {
							t.Fatal(err)
						}
						mw(rrt) // registers the route's query on the reconciler's runtime
						r, err := runtime.NewReconciler(rrt)
						if err != nil {
							t.Fatal(err)
						}
						if st, err := r.RunOnce(context.Background()); err != nil || st.Succeeded != 1 {
							t.Fatalf("reconcile: %+v, %v; the queries saw %q", st, err, c.seen)
						}
					}
					s, body := post()
					if s != http.StatusCreated || body != "ch_1" || c.runs != 1 {
						t.Fatalf("retry: %d %q, handler ran %d times; the queries saw %q", s, body, c.runs, c.seen)
					}
				})
			}
		}
	}
}
