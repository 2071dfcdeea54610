package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestNestedPlacementOuterLeaseRuleWhileInnerWaits: a per-process outer
// placement whose lease cannot be confirmed stops its effect (the lease
// rule) while the route's own placement, inside it, waits for the request
// in flight on the shared store. The client did not cancel: it must be
// told to retry (409 in-progress, as a wait that ends for any other reason
// than the client's own is), not 499 "request canceled".
func TestNestedPlacementOuterLeaseRuleWhileInnerWaits(t *testing.T) {
	for _, layout := range nestedLayouts {
		t.Run(layout, func(t *testing.T) {
			shared, err := runtime.New(memstore.New(), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			started, release := make(chan struct{}), make(chan struct{})
			route := idemhttp.Middleware(shared)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				<-release
				w.WriteHeader(http.StatusCreated)
			}))
			h, path := nestedInstance(layout, route)
			stalled, err := runtime.New(teststores.NoRenewals{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			key := "k-nested-rule-" + teststores.Unique()
			send := func(h http.Handler) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", path, strings.NewReader(`{"cents":100}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			testenv.Within(t, 15*time.Second, func() {
				// The route's claim is in flight when the outer placement's
				// lease rule stops it (seen in a process stall: load run 1
				// of d20fd9d, answered 499).
				slow, err := runtime.New(teststores.SlowClaims{Store: memstore.New()})
				if err != nil {
					t.Error(err)
					return
				}
				sh, _ := nestedInstance(layout, idemhttp.Middleware(slow)(http.NotFoundHandler()))
				w := send(idemhttp.Middleware(stalled)(sh))
				if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "#in-progress") {
					t.Errorf("a request whose outer placement's lease rule stopped the route's claim: %d %s, want 409 in-progress", w.Code, w.Body.String())
				}

				first := make(chan *httptest.ResponseRecorder, 1)
				go func() { first <- send(h) }() // the route alone: in flight
				<-started
				w = send(idemhttp.Middleware(stalled)(h)) // the retry, behind the stalled outer placement
				if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "#in-progress") {
					t.Errorf("the retry whose outer placement's lease rule stopped it: %d %s, want 409 in-progress", w.Code, w.Body.String())
				}
				close(release)
				<-first
			})
		})
	}
}
