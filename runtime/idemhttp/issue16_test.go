package idemhttp_test

// Regression tests for issue 16 (the adapters keep the exactly-once
// promise), over a real http.Server and on each store.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// withTimeout gives each request a deadline, as an outer middleware or a
// load balancer's budget would.
func withTimeout(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// problemType returns the anchor of a problem's type URI.
func problemType(res result) string {
	var p idemhttp.Problem
	_ = json.Unmarshal([]byte(res.body), &p)
	_, name, _ := strings.Cut(p.Type, "#")
	return name
}

// Bug 1 (HTTP audit): a handler that answers 504 after a downstream timed
// out, or that answers 5xx because its request's context ended, may have
// had its effect: the record is UNKNOWN under every error policy and a
// retry does not run it again.
func TestIssue16UncertainAnswers(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			for _, p := range []struct {
				name string
				opts []runtime.Option
			}{{"default policy", nil}, {"RecordFailed", []runtime.Option{runtime.WithErrorPolicy(runtime.RecordFailed)}}, {"ReleaseRecord", []runtime.Option{runtime.WithErrorPolicy(runtime.ReleaseRecord)}}} {
				t.Run(p.name, func(t *testing.T) {
					rt, err := runtime.New(store, p.opts...)
					if err != nil {
						t.Fatal(err)
					}
					hs := &harness{}
					mux := http.NewServeMux()
					mux.HandleFunc("POST /gateway-timeout", func(w http.ResponseWriter, r *http.Request) {
						hs.runs.Add(1)
						http.Error(w, "the payment service did not answer in time", http.StatusGatewayTimeout)
					})
					mux.HandleFunc("POST /context-ended", func(w http.ResponseWriter, r *http.Request) {
						hs.runs.Add(1)
						<-r.Context().Done() // the downstream call ran out of time
						http.Error(w, "charging: "+r.Context().Err().Error(), http.StatusServiceUnavailable)
					})
					// The request's deadline is set outside the middleware, as a
					// server's request budget is.
					hs.Server = newHTTPServer(t, withTimeout(100*time.Millisecond, idemhttp.Middleware(rt, quiet(),
						idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(mux)))
					tenant := teststores.Unique()
					for _, path := range []string{"/gateway-timeout", "/context-ended"} {
						t.Run(path, func(t *testing.T) {
							// The first request must reach the handler within its
							// 100 ms budget; on a loaded machine the claim alone
							// may use it up (answered 5xx by the middleware, the
							// handler never run), and the schedule did not happen:
							// it is tried again under a new key, as long as the
							// machine takes (a CI run at load 9 used up five
							// budgets in a row); so is a first request whose
							// budget ended before its outcome was recorded. A
							// handler that ran twice, or a retry answered
							// otherwise, fails at once.
							var first, retry result
							var n int32
							start := time.Now()
							for try := 0; ; try++ {
								last := try >= 100 || time.Since(start) > 20*time.Second
								key := fmt.Sprintf("k%d", try)
								before := hs.runs.Load()
								first = hs.do(t, req{path: path, keys: keys(key), tenant: tenant})
								if hs.runs.Load() == before {
									if last {
										t.Fatalf("%s: no first request reached the handler in %d tries (%v): last %d %s", path, try+1, time.Since(start), first.status, first.body)
									}
									if try < 5 {
										t.Logf("%s: the first request under %s never reached the handler (%d %s): again", path, key, first.status, first.body)
									}
									continue
								}
								retry = hs.do(t, req{path: path, keys: keys(key), tenant: tenant})
								n = hs.runs.Load() - before
								if n == 1 && retry.status == http.StatusGatewayTimeout && problemType(retry) == "timeout" && !last {
									// The first request's budget also ended before its
									// outcome was recorded (the machine's load): the
									// record is still PROCESSING under its lease, and
									// the retry was rightly told it waited for the
									// request in flight. Again, under a new key; a
									// record never completed fails every try.
									t.Logf("%s: the first request under %s ended before its outcome was recorded (retry: %d %s): again", path, key, retry.status, retry.body)
									continue
								}
								break
							}
							if n != 1 || first.status < 500 {
								t.Fatalf("%s: the handler ran %d times (first %d, retry %d %s)", path, n, first.status, retry.status, retry.body)
							}
							if retry.status != http.StatusConflict || problemType(retry) != "outcome-unknown" {
								t.Fatalf("%s: retry got %d %s; want 409 outcome-unknown", path, retry.status, retry.body)
							}
						})
					}
				})
			}
		})
	}
}

// Bug 5: two sub-muxes mounted with http.StripPrefix, each routing
// "POST /{id}" with the middleware around each handler (or around each
// sub-mux), never share identities: a refund is not answered with the
// payment's response.
func TestIssue16StripPrefix(t *testing.T) {
	for _, placement := range []string{"around each handler", "around each sub-mux", "under StripPrefix, no sub-mux"} {
		t.Run(placement, func(t *testing.T) {
			var payments, refunds atomic.Int32
			rt, err := runtime.New(teststores.All()[0].New(t))
			if err != nil {
				t.Fatal(err)
			}
			mw := idemhttp.Middleware(rt, quiet(), idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
			sub := func(name string, n *atomic.Int32) http.Handler {
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"%s":"%s_%d"}`, name, r.PathValue("id"), n.Add(1))
				})
				if placement == "under StripPrefix, no sub-mux" {
					return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						r.SetPathValue("id", strings.TrimPrefix(r.URL.Path, "/"))
						h.ServeHTTP(w, r)
					}))
				}
				mux := http.NewServeMux()
				if placement == "around each handler" {
					mux.Handle("POST /{id}", mw(h))
					return mux
				}
				mux.Handle("POST /{id}", h)
				return mw(mux)
			}
			root := http.NewServeMux()
			root.Handle("/payments/", http.StripPrefix("/payments", sub("payment", &payments)))
			root.Handle("/refunds/", http.StripPrefix("/refunds", sub("refund", &refunds)))
			hs := &harness{Server: newHTTPServer(t, root)}
			pay := hs.do(t, req{path: "/payments/ord-1", keys: keys("ord-1")})
			ref := hs.do(t, req{path: "/refunds/ord-1", keys: keys("ord-1")})
			again := hs.do(t, req{path: "/refunds/ord-1", keys: keys("ord-1")})
			if pay.status != http.StatusCreated || ref.status != http.StatusCreated || ref.body != `{"refund":"ord-1_1"}` ||
				again.body != ref.body || again.header.Get(idemhttp.ReplayedHeader) != "true" || refunds.Load() != 1 || payments.Load() != 1 {
				t.Fatalf("payment %d %s, refund %d %s, refund again %d %s (payments %d, refunds %d)",
					pay.status, pay.body, ref.status, ref.body, again.status, again.body, payments.Load(), refunds.Load())
			}
		})
	}
}

// Bug 6: a record that became FAILED through a no-query policy or a
// resolution by hand is a stable 4xx problem with the stored code and
// message, not 503.
func TestIssue16FailedRecord(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			log, logs := testlog.New()
			store := st.New(t)
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				http.Error(w, "timeout", http.StatusGatewayTimeout)
			})
			if err := runtime.RegisterNoQuery(rt, "POST /charges", runtime.NoQueryPolicy{After: time.Millisecond, Resolve: runtime.NotHappenedFail}); err != nil {
				t.Fatal(err)
			}
			hs := &harness{}
			hs.Server = newHTTPServer(t, idemhttp.Middleware(rt, idemhttp.Logger(log),
				idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(mux))
			tenant := teststores.Unique()
			for _, k := range []string{"policy", "by-hand"} {
				hs.do(t, req{keys: keys(k), tenant: tenant})
			}
			ctx := context.Background()
			id := runtime.Identity{Scope: tenant, Operation: "POST /charges", Key: "by-hand"}
			if _, err := runtime.Resolve(ctx, store, runtime.Resolution{ID: id, To: runtime.ResolveFailed, Reason: "test", Owner: "test",
				Failure: runtime.Permanent(coded{"card_declined", "card declined by the issuer"})}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			rec, err := runtime.NewReconciler(rt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ key, code, detail string }{
				{"policy", "", "recorded as failed"},
				{"by-hand", "card_declined", "card declined by the issuer"},
			} {
				for range 2 {
					res := hs.do(t, req{keys: keys(c.key), tenant: tenant})
					var p struct {
						idemhttp.Problem
						Code string `json:"code"`
					}
					_ = json.Unmarshal([]byte(res.body), &p)
					if res.status != http.StatusUnprocessableEntity || problemType(res) != "failed" || p.Code != c.code ||
						!strings.Contains(p.Detail, c.detail) || res.header.Get("Retry-After") != "" {
						t.Fatalf("%s: %d %s", c.key, res.status, res.body)
					}
				}
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times", n)
			}
			if e := logs.At(slog.LevelError); len(e) != 0 {
				t.Fatalf("logged at ERROR: %q", e)
			}
		})
	}
}

type coded struct{ code, msg string }

func (c coded) Error() string     { return c.msg }
func (c coded) ErrorCode() string { return c.code }

// Bug 8: a duplicate whose request context ends while it waits for the
// request in flight is answered as such (504 for a deadline), and nothing
// is logged at ERROR.
func TestIssue16DuplicateContextEnds(t *testing.T) {
	log, logs := testlog.New()
	rt, err := runtime.New(teststores.All()[0].New(t))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	mw := idemhttp.Middleware(rt, idemhttp.Logger(log))(mux)
	hs := &harness{}
	hs.Server = newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Budget") != "" {
			withTimeout(50*time.Millisecond, mw).ServeHTTP(w, r)
			return
		}
		mw.ServeHTTP(w, r)
	}))
	done := make(chan result)
	go func() { done <- hs.do(t, req{keys: keys("k1")}) }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	r, _ := http.NewRequest(http.MethodPost, hs.URL+"/charges", nil)
	r.Header.Set(idemhttp.DefaultHeader, "k1")
	r.Header.Set("X-Budget", "50ms")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(release)
	if first := <-done; first.status != http.StatusCreated {
		t.Fatalf("first: %d", first.status)
	}
	if resp.StatusCode != http.StatusGatewayTimeout || problemType(result{body: string(b)}) != "timeout" {
		t.Fatalf("duplicate past its deadline: %d %s", resp.StatusCode, b)
	}
	if e := logs.At(slog.LevelError); len(e) != 0 {
		t.Fatalf("logged at ERROR: %q", e)
	}
}

// Issue 16 features: a scope over 255 bytes, and a record resolved by hand
// in the documented JSON form.
func TestIssue16Features(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			hs := newHarness(t, store, nil, muxOf("POST /charges", func(w http.ResponseWriter, r *http.Request, n int32) {
				if r.Header.Get("X-Mode") == "timeout" {
					http.Error(w, "timeout", http.StatusGatewayTimeout)
					return
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"charge":"ch_%d"}`, n)
			}))
			tenant := teststores.Unique()
			long := tenant + strings.Repeat("spiffe://example.org/ns/payments/sa/", 8)
			a := hs.do(t, req{keys: keys("k1"), tenant: long + "a"})
			b := hs.do(t, req{keys: keys("k1"), tenant: long + "a"})
			c := hs.do(t, req{keys: keys("k1"), tenant: long + "b"})
			if a.status != http.StatusCreated || b.body != a.body || b.header.Get(idemhttp.ReplayedHeader) != "true" ||
				c.status != http.StatusCreated || c.body == a.body {
				t.Fatalf("long scopes: %d %s / %d %s / %d %s", a.status, a.body, b.status, b.body, c.status, c.body)
			}

			r, _ := http.NewRequest(http.MethodPost, hs.URL+"/charges", nil)
			r.Header.Set(idemhttp.DefaultHeader, "resolved")
			r.Header.Set("X-Tenant", tenant)
			r.Header.Set("X-Mode", "timeout")
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			id := runtime.Identity{Scope: tenant, Operation: "POST /charges", Key: "resolved"}
			for _, body := range []string{
				`{"status":201,"headers":{"Content-Type":"application/json","X-Charge":["ch_by_hand"]},"body":{"charge":"ch_by_hand"}}`,
			} {
				if _, err := runtime.Resolve(context.Background(), store, runtime.Resolution{ID: id, To: runtime.ResolveSuccess, Reason: "test", Owner: "test", Response: []byte(body)}); err != nil {
					t.Fatal(err)
				}
			}
			got := hs.do(t, req{keys: keys("resolved"), tenant: tenant})
			if got.status != http.StatusCreated || got.body != `{"charge":"ch_by_hand"}` || got.header.Get("Content-Type") != "application/json" ||
				got.header.Get("X-Charge") != "ch_by_hand" || got.header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("resolved by hand: %d %v %s", got.status, got.header, got.body)
			}
		})
	}
}

func newHTTPServer(t *testing.T, h http.Handler) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// A route's "did it happen?" query: the handler answers 504 after its
// effect; a duplicate converges through the query inline, and the
// reconciler converges another such request, without the handler running
// again.
func TestIssue16Query(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			var ledger, tokens sync.Map
			q := func(ctx context.Context, r idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				tok, ok := runtime.FencingToken(ctx)
				tokens.Store(r.Target, ok && tok > 0)
				if charge, ok := ledger.Load(r.Target); ok {
					return idemhttp.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
						Body: []byte(charge.(string))}, runtime.OutcomeSucceeded, nil
				}
				return idemhttp.Response{}, runtime.OutcomeNotHappened, nil
			}
			store := st.New(t)
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges/{order}", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				ledger.Store(r.URL.RequestURI(), fmt.Sprintf(`{"charge":"ch_%d","request":%q}`, runs.Add(1), body))
				http.Error(w, "the payment service did not answer in time", http.StatusGatewayTimeout)
			})
			hs := &harness{Server: newHTTPServer(t, idemhttp.Middleware(rt, quiet(),
				idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
				idemhttp.Query("POST /charges/{order}", q, runtime.QueryOptions{}))(mux))}
			tenant := teststores.Unique()
			for i, order := range []string{"inline", "reconciler"} {
				path := "/charges/" + order + "?currency=eur"
				first := hs.do(t, req{path: path, keys: keys(order), tenant: tenant, body: "cents=5"})
				if first.status != http.StatusGatewayTimeout {
					t.Fatalf("%s: first: %d %s", order, first.status, first.body)
				}
				if order == "reconciler" {
					rec, err := runtime.NewReconciler(rt)
					if err != nil {
						t.Fatal(err)
					}
					if st, err := rec.RunOnce(context.Background()); err != nil || st.Succeeded != 1 {
						t.Fatalf("reconciler: %+v %v", st, err)
					}
				}
				dup := hs.do(t, req{path: path, keys: keys(order), tenant: tenant, body: "cents=5"})
				want := fmt.Sprintf(`{"charge":"ch_%d","request":"cents=5"}`, i+1)
				if dup.status != http.StatusCreated || dup.body != want || dup.header.Get("Content-Type") != "application/json" {
					t.Fatalf("%s: duplicate: %d %s; want 201 %s", order, dup.status, dup.body, want)
				}
				if ok, _ := tokens.Load(path); ok != true {
					t.Fatalf("%s: the query got no fencing token", order)
				}
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times; want 2", n)
			}
		})
	}
}
