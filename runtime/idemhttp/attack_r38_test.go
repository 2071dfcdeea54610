package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
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

// TestR38InProcessCloneOtherHostReleasesOuterRecord: docs/http.md, top: "A
// request the handler makes itself in-process, on the request's context, is
// its own whatever it shares with the client's (a clone, the body handed
// on): to another target, even with the client's key, ... it leaves the
// outer record the handler's"; README: "the handler runs at most once per
// (scope, route as the client sees it, key)" and "two routes never share an
// identity: ... where none does the request as sent (method, host, path)
// does". A service routes by host ("POST a.example/pay", "POST
// b.example/pay"); the handler of a.example clones its request and sends it
// in-process to b.example's route (the same path), with the client's key.
// The inner placement compares key, method and path+query only: it takes
// the clone for the outer one's own request and defers, the outer placement
// releases its record, and the client's retry runs a.example's handler
// again. Run with one placement (the same middleware value called again in
// process, one runtime) and with the inner one on another store.
func TestR38InProcessCloneOtherHostReleasesOuterRecord(t *testing.T) {
	for _, layout := range []string{"one-placement", "inner-other-store"} {
		for _, st := range teststores.All() {
			t.Run(layout+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var aRuns, bRuns atomic.Int32
				mux := http.NewServeMux()
				var h http.Handler
				inner := func() http.Handler { return h }
				if layout == "inner-other-store" {
					other, err := runtime.New(memstore.New())
					if err != nil {
						t.Fatal(err)
					}
					bmux := http.NewServeMux()
					bmux.HandleFunc("POST b.example/pay", func(w http.ResponseWriter, r *http.Request) {
						bRuns.Add(1)
						io.Copy(io.Discard, r.Body)
						w.WriteHeader(http.StatusCreated)
					})
					ib := idemhttp.Middleware(other)(bmux)
					inner = func() http.Handler { return ib }
				} else {
					mux.HandleFunc("POST b.example/pay", func(w http.ResponseWriter, r *http.Request) {
						bRuns.Add(1)
						io.Copy(io.Discard, r.Body)
						w.WriteHeader(http.StatusCreated)
					})
				}
				mux.HandleFunc("POST a.example/pay", func(w http.ResponseWriter, r *http.Request) {
					aRuns.Add(1) // a.example's effect
					sub := r.Clone(r.Context())
					sub.Host = "b.example" // the partner service, same path, the client's key handed on
					sw := httptest.NewRecorder()
					inner().ServeHTTP(sw, sub)
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "paid (partner answered %d)", sw.Code)
				})
				h = idemhttp.Middleware(rt)(mux)
				key := "k-r38-host-" + teststores.Unique()
				testenv.Within(t, 15*time.Second, func() {
					for i := range 2 {
						r := httptest.NewRequest("POST", "/pay", strings.NewReader(`{"amount":1}`))
						r.Host = "a.example"
						r.Header.Set("Idempotency-Key", key)
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						if w.Code != http.StatusCreated {
							t.Errorf("attempt %d: %d %q", i, w.Code, w.Body.String())
						}
						if i == 1 && w.Header().Get("Idempotent-Replayed") != "true" {
							t.Errorf("the retry was not replayed (Idempotent-Replayed %q)", w.Header().Get("Idempotent-Replayed"))
						}
					}
				})
				if aRuns.Load() != 1 {
					t.Errorf("a.example's handler ran %d times for one key, want 1 (b.example's ran %d)", aRuns.Load(), bRuns.Load())
				}
			})
		}
	}
}

// TestR38DerivedRequestOutsideAClaimNamedByEntryRoute: docs/http.md, top: "A
// request the handler makes itself in-process, on the request's context, is
// its own whatever it shares with the client's (a clone, the body handed
// on) ... (such a request is named by its own URL: a clone keeps the
// client's RequestURI and r.Pattern, which count only while the URL's path
// ... and its query are the ones they describe ...)"; "Inside another
// placement's handler a URL that is not the one RequestURI describes is a
// request the handler made itself, named by its own URL". README: "the
// handler runs at most once per (scope, route as the client sees it, key)".
//
// The middleware wraps the mux; two entry points that carry no
// Idempotency-Key (a GET landing page a payment provider redirects the
// user to, and the provider's webhook, which sends no key) both capture the
// order by cloning their request into POST /orders/{id}/capture with the
// key "capture-<order>" and sending it through the middleware in process.
// No placement claimed the entry request (a safe method, no key), so the
// clone's context carries no exchange, and original() takes the clone for a
// request a middleware rewrote in front of the middleware: it is named by
// the entry route's RequestURI ("POST /orders/{id}/capture at
// /checkout/confirm", "... at /webhooks/psp"), and its fingerprint is the
// entry's target. One capture, one key, two names: it runs twice.
func TestR38DerivedRequestOutsideAClaimNamedByEntryRoute(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			var captures atomic.Int32
			mux := http.NewServeMux()
			var h http.Handler
			capture := func(w http.ResponseWriter, r *http.Request, order string) int {
				sub := r.Clone(r.Context())
				sub.Method = http.MethodPost
				sub.URL.Path = "/orders/" + order + "/capture"
				sub.URL.RawQuery = ""
				sub.Body = io.NopCloser(strings.NewReader(`{"order":"` + order + `"}`))
				sub.ContentLength = -1
				sub.Header.Set("Idempotency-Key", "capture-"+order)
				sw := httptest.NewRecorder()
				h.ServeHTTP(sw, sub)
				return sw.Code
			}
			mux.HandleFunc("POST /orders/{id}/capture", func(w http.ResponseWriter, r *http.Request) {
				captures.Add(1) // the card is charged
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusCreated)
			})
			mux.HandleFunc("GET /checkout/confirm", func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "capture %d", capture(w, r, r.URL.Query().Get("order")))
			})
			mux.HandleFunc("POST /webhooks/psp", func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "capture %d", capture(w, r, strings.TrimSpace(string(b))))
			})
			h = idemhttp.Middleware(rt)(mux)
			order := "o" + teststores.Unique()
			testenv.Within(t, 15*time.Second, func() {
				r := httptest.NewRequest("GET", "/checkout/confirm?order="+order, nil)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				t.Logf("landing page: %d %q", w.Code, w.Body.String())
				r = httptest.NewRequest("POST", "/webhooks/psp", strings.NewReader(order))
				w = httptest.NewRecorder()
				h.ServeHTTP(w, r)
				t.Logf("webhook: %d %q", w.Code, w.Body.String())
			})
			if captures.Load() != 1 {
				t.Errorf("POST /orders/%s/capture with key capture-%s ran %d times, want 1", order, order, captures.Load())
			}
		})
	}
}

// TestR38DerivedRequestsOutsideAClaimShareOneRecord: docs/http.md, "What
// the same request is": where no pattern pins the route "the operation is
// the request as the client sent it: the method, the Host and the escaped
// path ... so two resources, or two hosts, never share an identity"; "(where
// no pattern pins the route, each host and path is a route of its own)".
// The middleware wraps a router that is not a ServeMux (a plain handler
// routing by path). A webhook without a key (the provider sends none) books
// one event on two accounts through in-process clones, each with the
// event's id as its key: POST /accounts/A/entries and POST
// /accounts/B/entries. Both clones keep the webhook's RequestURI, and with no
// exchange in their context both are named by it ("POST
// example.com/webhooks/psp as sent") with one fingerprint: B's entry is
// answered A's replay and never booked.
func TestR38DerivedRequestsOutsideAClaimShareOneRecord(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			booked := map[string]int{}
			var h http.Handler
			router := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case strings.HasPrefix(r.URL.Path, "/accounts/") && strings.HasSuffix(r.URL.Path, "/entries"):
					acct := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/accounts/"), "/entries")
					booked[acct]++
					io.Copy(io.Discard, r.Body)
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "booked on %s", acct)
				case r.URL.Path == "/webhooks/psp":
					b, _ := io.ReadAll(r.Body)
					event := strings.TrimSpace(string(b))
					for _, acct := range []string{"A", "B"} {
						sub := r.Clone(r.Context())
						sub.URL.Path = "/accounts/" + acct + "/entries"
						sub.Body = io.NopCloser(strings.NewReader(`{"amount":100}`))
						sub.ContentLength = -1
						sub.Header.Set("Idempotency-Key", event)
						sw := httptest.NewRecorder()
						h.ServeHTTP(sw, sub)
						fmt.Fprintf(w, "%s: %d %q (replayed %q)\n", acct, sw.Code, sw.Body.String(), sw.Header().Get("Idempotent-Replayed"))
					}
				default:
					http.NotFound(w, r)
				}
			})
			h = idemhttp.Middleware(rt)(router)
			event := "evt-" + teststores.Unique()
			testenv.Within(t, 15*time.Second, func() {
				r := httptest.NewRequest("POST", "/webhooks/psp", strings.NewReader(event))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				t.Logf("webhook answered:\n%s", w.Body.String())
			})
			if booked["A"] != 1 || booked["B"] != 1 {
				t.Errorf("entries booked: A %d, B %d; want 1 each (two resources, two identities)", booked["A"], booked["B"])
			}
		})
	}
}

// TestR38RewriteInFrontOfOuterRecordsInnerInProgress: docs/http.md, top: "A
// middleware between the two placements that changes the method or the
// target (a method override, a path rewrite) makes the request another one
// to the inner placement, and the outer one then records what the inner one
// answers, a 409 in-progress too: rewrite in front of the outer placement,
// or put one placement only." And: "An inner placement on another store (a
// route's shared store behind a per-process outer middleware) claims the
// request in its own store as if it were alone, and its record is the
// request's: the outer one passes its answer to the client, records nothing
// for the request and releases its key (a 409 in-progress while another
// instance runs the request ... would be replayed there long after it
// stopped being true)".
//
// The documented remedy: the rewriter (/tenants/{t}/orders/new to
// /orders/create) goes in front of the outer, per-process placement; the
// inner placement around the route is on the shared store. Two instances
// (two outer placements on two memory stores, one shared inner store). The
// outer one names the request by RequestURI (the client's target); the
// inner one runs inside the outer one's handler, sees a URL that is not the
// one RequestURI describes and names it by its own: the targets differ, the
// inner one does not defer, and instance 2's outer placement records the
// inner one's 409 in-progress and replays it (Idempotent-Replayed: true,
// which clients never retry) after the order was placed.
func TestR38RewriteInFrontOfOuterRecordsInnerInProgress(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			shared, err := runtime.New(st.New(t), runtime.WithMaxWait(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			started, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int32
			route := idemhttp.Middleware(shared)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					close(started)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("order for tenant " + r.Header.Get("X-Tenant")))
			}))
			instance := func() http.Handler {
				local, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				mux := http.NewServeMux()
				mux.Handle("POST /orders/create", route)
				outer := idemhttp.Middleware(local)(mux)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					parts := strings.Split(r.URL.Path, "/")
					if len(parts) == 5 && parts[1] == "tenants" && parts[3] == "orders" && parts[4] == "new" {
						r.Header.Set("X-Tenant", parts[2])
						r.URL.Path = "/orders/create"
					}
					outer.ServeHTTP(w, r)
				})
			}
			one, two := instance(), instance()
			key := "k-r38-rewrite-outer-" + teststores.Unique()
			send := func(h http.Handler) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/tenants/a/orders/new", strings.NewReader(`{"item":1}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			testenv.Within(t, 15*time.Second, func() {
				first := make(chan *httptest.ResponseRecorder, 1)
				go func() { first <- send(one) }()
				<-started
				busy := send(two) // the retry reaches instance 2 while instance 1 runs it
				t.Logf("retry on instance 2 while in flight: %d (Idempotent-Replayed %q)", busy.Code, busy.Header().Get("Idempotent-Replayed"))
				close(release)
				w1 := <-first
				if w1.Code != http.StatusCreated {
					t.Errorf("first request: %d %q", w1.Code, w1.Body.String())
				}
				later := send(two) // the order is placed: instance 2 must replay it
				if later.Code != http.StatusCreated {
					t.Errorf("a retry on instance 2 after the order was placed: %d %q (Idempotent-Replayed %q), want 201 replayed: instance 2 recorded the inner placement's in-flight answer",
						later.Code, strings.TrimSpace(later.Body.String()), later.Header().Get("Idempotent-Replayed"))
				}
			})
			if runs.Load() != 1 {
				t.Errorf("handler ran %d times", runs.Load())
			}
		})
	}
}

// TestR38RewriteInFrontOfTwoPlacementsUnknownNeverConverges: the same
// documented remedy ("rewrite in front of the outer placement") with both
// placements on one runtime (around the mux, and around the route with its
// query), the layout docs/http.md describes: "the outer one handles the
// request and the inner one passes it through to the handler when it names
// the same identity ...; the outer one then runs the call with the route's
// query whichever placement was given it, when both are on one runtime".
// With the rewriter in front, the outer placement names the request "POST
// /orders/create at /tenants/a/orders/new" and the inner one, which runs
// inside the outer one's handler and names it by its own URL, "POST
// /orders/create": two identities, so both claim; the handler's 504 is
// UNKNOWN in both records, the reconciler converges the route's record
// through its query, and the outer record, whose operation has no query,
// answers every retry 409 outcome-unknown for good.
func TestR38RewriteInFrontOfTwoPlacementsUnknownNeverConverges(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			var runs, asked atomic.Int32
			q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				asked.Add(1)
				return idemhttp.Response{Status: http.StatusCreated, Body: []byte("order placed")}, runtime.OutcomeSucceeded, nil
			}
			route := idemhttp.Middleware(rt, idemhttp.Query("POST /orders/create", q, runtime.QueryOptions{}))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1) // the order went out; the downstream's answer timed out
					w.WriteHeader(http.StatusGatewayTimeout)
				}))
			mux := http.NewServeMux()
			mux.Handle("POST /orders/create", route)
			outer := idemhttp.Middleware(rt)(mux)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				parts := strings.Split(r.URL.Path, "/")
				if len(parts) == 5 && parts[1] == "tenants" && parts[3] == "orders" && parts[4] == "new" {
					r.Header.Set("X-Tenant", parts[2])
					r.URL.Path = "/orders/create"
				}
				outer.ServeHTTP(w, r)
			})
			key := "k-r38-rewrite-unknown-" + teststores.Unique()
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/tenants/a/orders/new", strings.NewReader(`{"item":1}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			testenv.Within(t, 15*time.Second, func() {
				if w := send(); w.Code != http.StatusGatewayTimeout {
					t.Errorf("the first request: %d, want the handler's 504", w.Code)
				}
				rec, err := runtime.NewReconciler(rt)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := rec.RunOnce(context.Background()); err != nil {
					t.Errorf("reconcile: %v", err)
				}
				w := send()
				if w.Code != http.StatusCreated || w.Body.String() != "order placed" {
					t.Errorf("a retry after the reconciler ran: %d %q (query asked %d times), want the converged 201", w.Code, strings.TrimSpace(w.Body.String()), asked.Load())
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// TestR38NestedGoexitOuterRecordsUnknown: docs/http.md, top: "An inner
// placement on another store (a route's shared store behind a per-process
// outer middleware) claims the request in its own store as if it were
// alone, and its record is the request's: the outer one passes its answer
// to the client, records nothing for the request and releases its key (...
// an UNKNOWN that only the shared store's reconciler converges, recorded in
// the per-process store, would be replayed there long after it stopped
// being true)"; README, Observability: "A call that leaves before its
// outcome is recorded (an effect that calls runtime.Goexit, as t.FailNow
// does) stops its renewals and records UNKNOWN on its way out".
//
// The handler behind the inner placement (shared store, with the route's
// query) calls runtime.Goexit after its effect. The inner placement records
// UNKNOWN, as documented, and the shared store's reconciler converges it
// through the query. But the outer, per-process placement's call leaves
// too, and the runtime records UNKNOWN in the per-process store, whose
// runtime has no query and no reconciler: the deferral (errDeferred) is
// read only when the handler returns. Every retry on that instance is
// answered 409 outcome-unknown for good, after the request converged.
func TestR38NestedGoexitOuterRecordsUnknown(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			shared, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			var runs, asked atomic.Int32
			q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				asked.Add(1)
				return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged")}, runtime.OutcomeSucceeded, nil
			}
			route := idemhttp.Middleware(shared, idemhttp.Query("POST /pay/{id}", q, runtime.QueryOptions{}))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1) // the charge went out
					goruntime.Goexit()
				}))
			mux := http.NewServeMux()
			mux.Handle("POST /pay/{id}", route)
			h := idemhttp.Middleware(local)(mux) // the per-process placement
			key := "k-r38-goexit-" + teststores.Unique()
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/pay/ch_1", strings.NewReader(`{"cents":100}`))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			testenv.Within(t, 15*time.Second, func() {
				done := make(chan struct{})
				go func() { defer close(done); send() }()
				<-done
				rec, err := runtime.NewReconciler(shared)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := rec.RunOnce(context.Background()); err != nil {
					t.Errorf("reconcile: %v", err)
				}
				w := send()
				if w.Code != http.StatusCreated || w.Body.String() != "charged" {
					t.Errorf("a retry on the same instance after the shared record converged: %d %q (query asked %d times), want the converged 201", w.Code, strings.TrimSpace(w.Body.String()), asked.Load())
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}

// TestR38InProcessCloneOtherScopeReleasesOuterRecord: the scope sibling of
// TestR38InProcessCloneOtherHostReleasesOuterRecord. docs/http.md: "Two
// scopes never meet: one client never gets another's response", and "A
// request the handler makes itself in-process ... is its own ... it leaves
// the outer record the handler's". The middleware's scope is the tenant
// header (idemhttp.Scope); a platform's handler acts on its connected
// account by cloning the request with the account's tenant header, same
// path and key, through the same middleware in process. The inner
// placement names it in the account's scope (another identity) but defers
// as for the outer one's own request (key, method, path and query match),
// and the outer placement releases its record: the client's retry runs the
// platform's handler again.
func TestR38InProcessCloneOtherScopeReleasesOuterRecord(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			var platformRuns, accountRuns atomic.Int32
			var h http.Handler
			mux := http.NewServeMux()
			mux.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Tenant") != "platform" {
					accountRuns.Add(1)
					io.Copy(io.Discard, r.Body)
					w.WriteHeader(http.StatusCreated)
					return
				}
				platformRuns.Add(1) // the platform's own ledger entry
				sub := r.Clone(r.Context())
				sub.Header.Set("X-Tenant", "acct_1")
				sw := httptest.NewRecorder()
				h.ServeHTTP(sw, sub)
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "transferred (account answered %d)", sw.Code)
			})
			h = idemhttp.Middleware(rt, idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(mux)
			key := "k-r38-scope-" + teststores.Unique()
			testenv.Within(t, 15*time.Second, func() {
				for i := range 2 {
					r := httptest.NewRequest("POST", "/transfers", strings.NewReader(`{"amount":1}`))
					r.Header.Set("X-Tenant", "platform")
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if i == 1 && w.Header().Get("Idempotent-Replayed") != "true" {
						t.Errorf("the retry was not replayed: %d %q", w.Code, w.Body.String())
					}
				}
			})
			if platformRuns.Load() != 1 {
				t.Errorf("the platform's handler ran %d times for one key, want 1 (the account's ran %d)", platformRuns.Load(), accountRuns.Load())
			}
		})
	}
}
