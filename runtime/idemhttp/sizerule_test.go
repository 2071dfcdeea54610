package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// The size rule never turns a failure into a success: an answer over the
// store's limit keeps its status, and a duplicate's not-replayable answer
// says what the first answer was (its status and class), never that the
// request succeeded. A success over the limit still says it succeeded.
func TestSizeRuleKeepsTheStatus(t *testing.T) {
	stores := limitedStores()
	big := strings.Repeat("x", 800<<10) // over 1 MiB once stored in base64
	for _, st := range stores {
		for _, tc := range []struct {
			status int
			want   string
		}{
			{http.StatusUnprocessableEntity, "422 (a client error)"},
			{http.StatusNotFound, "404 (a client error)"},
			{http.StatusNotImplemented, "501 (a server error)"},
			{http.StatusOK, "succeeded"},
		} {
			t.Run(fmt.Sprintf("%s/%d", st.Name, tc.status), func(t *testing.T) {
				store := st.New(t)
				hs := newHarness(t, store, nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, big)
				}), idemhttp.RetryableStatus(func(s int) bool { return s == http.StatusServiceUnavailable })) // 501 is stored
				tenant := teststores.Unique()
				first := hs.do(t, req{keys: keys("k1"), tenant: tenant, body: "{}"})
				if first.status != tc.status || first.body != big {
					t.Fatalf("first: %d, %d bytes", first.status, len(first.body))
				}
				dup := hs.do(t, req{keys: keys("k1"), tenant: tenant, body: "{}"})
				if dup.status != http.StatusGone || !strings.Contains(dup.body, tc.want) {
					t.Fatalf("duplicate: %d %s; want 410 saying %q", dup.status, dup.body, tc.want)
				}
				if tc.status >= 300 && strings.Contains(dup.body, "succeeded") {
					t.Fatalf("duplicate of a %d: %s", tc.status, dup.body)
				}
				if n := hs.runs.Load(); n != 1 {
					t.Fatalf("handler ran %d times", n)
				}
			})
		}
	}
}

// The size rule applies to a response a route's query found as it does to
// a handler's: over the store's limit, its short form keeps the status, so
// a duplicate of a 422 the query found learns it was a 422. Schedule: the
// handler answers 504 (UNKNOWN); a duplicate's query (inline), or a
// reconciler's, finds the request answered, with a body over the limit;
// the next duplicate replays.
func TestSizeRuleKeepsTheQuerysStatus(t *testing.T) {
	stores := limitedStores()
	big := strings.Repeat("x", 800<<10)
	for _, st := range stores {
		for _, tc := range []struct {
			status int
			want   string
		}{
			{http.StatusUnprocessableEntity, "422 (a client error)"},
			{http.StatusCreated, "succeeded (answered 201)"},
		} {
			for _, by := range []string{"inline", "reconciler"} {
				t.Run(fmt.Sprintf("%s/%d/%s", st.Name, tc.status, by), func(t *testing.T) {
					q := func(ctx context.Context, r idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
						return idemhttp.Response{Status: tc.status, Body: []byte(big)}, runtime.OutcomeSucceeded, nil
					}
					hs := newHarness(t, st.New(t), nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
						w.WriteHeader(http.StatusGatewayTimeout)
					}), idemhttp.Query("POST /charges", q, runtime.QueryOptions{}))
					tenant := teststores.Unique()
					if first := hs.do(t, req{keys: keys("k1"), tenant: tenant, body: "{}"}); first.status != http.StatusGatewayTimeout {
						t.Fatalf("first: %d", first.status)
					}
					if by == "inline" {
						found := hs.do(t, req{keys: keys("k1"), tenant: tenant, body: "{}"})
						if found.status != tc.status || found.body != big {
							t.Fatalf("the duplicate whose query found it: %d, %d bytes", found.status, len(found.body))
						}
					} else {
						r, err := runtime.NewReconciler(hs.rt)
						if err != nil {
							t.Fatal(err)
						}
						if s, err := r.RunOnce(context.Background()); err != nil || s.Succeeded != 1 {
							t.Fatalf("reconciler: %+v %v", s, err)
						}
					}
					dup := hs.do(t, req{keys: keys("k1"), tenant: tenant, body: "{}"})
					if dup.status != http.StatusGone || !strings.Contains(dup.body, tc.want) {
						t.Fatalf("next duplicate: %d %s; want 410 saying %q", dup.status, dup.body, tc.want)
					}
					if n := hs.runs.Load(); n != 1 {
						t.Fatalf("handler ran %d times", n)
					}
				})
			}
		}
	}
}

// limitedStores are the stores with a record limit: the memory store behind
// a 1 MiB limit (alone it has none and replays everything) and the others.
func limitedStores() []teststores.Store {
	stores := []teststores.Store{{Name: "memory-1MiB", New: func(testing.TB) runtime.Store { return limitStore{memstore.New(), 1 << 20} }}}
	for _, st := range teststores.All() {
		if st.Name != "memory" {
			stores = append(stores, st)
		}
	}
	return stores
}
