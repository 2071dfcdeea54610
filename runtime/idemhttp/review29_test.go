// Regression tests from the fresh review of issue 29 (queries see what the
// handler saw, replays are the original answer): a scope that is not valid
// UTF-8 was stored through JSON text and the reconciler's query looked in
// another tenant (a double charge); the size rule spun forever on a
// failure whose note stayed over its bound. Header names that differ only
// in case are replayed under their canonical name, and trailers are not
// stored (docs/http.md, Headers): those cases are not here.

package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

type a29Charges struct {
	mu      sync.Mutex
	charges map[string]string
	runs    int
	seen    []string
}

func (c *a29Charges) handler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.runs++
	id := fmt.Sprintf("ch_%d", c.runs)
	c.charges[runtime.ScopeFrom(r.Context())+"\x00"+string(b)] = id
	c.mu.Unlock()
	w.WriteHeader(http.StatusGatewayTimeout)
}

func (c *a29Charges) query(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fmt.Sprintf("req=%q ctx=%q", req.Scope, runtime.ScopeFrom(ctx)))
	if req.Scope != runtime.ScopeFrom(ctx) {
		return idemhttp.Response{}, runtime.OutcomeUnknown, fmt.Errorf("mismatch")
	}
	if id, ok := c.charges[req.Scope+"\x00"+string(req.Body)]; ok {
		return idemhttp.Response{Status: http.StatusCreated, Body: []byte(id)}, runtime.OutcomeSucceeded, nil
	}
	// a query that looks in the wrong tenant says "did not happen"
	return idemhttp.Response{}, runtime.OutcomeNotHappened, nil
}

func a29ScopeRun(t *testing.T, tenant string, useOpt bool, reconciler bool) {
	t.Helper()
	store := memstore.New()
	c := &a29Charges{charges: map[string]string{}}
	mw := func(rt *runtime.Runtime) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /charges", c.handler)
		opts := []idemhttp.Option{idemhttp.Query("POST /charges", c.query, runtime.QueryOptions{})}
		if useOpt {
			opts = append(opts, idemhttp.Scope(func(r *http.Request) string { return tenant }))
		}
		return idemhttp.Middleware(rt, opts...)(mux)
	}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(rt)
	post := func() (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":7}`))
		r.Header.Set("Idempotency-Key", "k1")
		if !useOpt {
			r = r.WithContext(runtime.WithScope(r.Context(), tenant))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	if s, b := post(); s != http.StatusGatewayTimeout {
		t.Fatalf("first: %d %s", s, b)
	}
	if reconciler {
		rrt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		mw(rrt)
		r, err := runtime.NewReconciler(rrt)
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.RunOnce(context.Background())
		t.Logf("reconcile: %+v %v", st, err)
	}
	s, body := post()
	if c.runs != 1 || s != http.StatusCreated || body != "ch_1" {
		t.Fatalf("retry: %d %q, handler ran %d times; the queries saw %q", s, body, c.runs, c.seen)
	}
}

func a29Scopes() map[string]string {
	return map[string]string{
		"digestMarkerShort": "tenant…#sha256:abc",
		"invalidUTF8Long":   "spiffe://x/" + strings.Repeat("a", 300) + "\xff\xfe",
		"invalidUTF8Short":  "t\xffx",
		"spaceShort":        "tenant one",
		"ctrlShort":         "ten\x00ant",
		"exact255":          strings.Repeat("b", 255),
		"exact256":          strings.Repeat("c", 256),
		"empty":             "",
		"unicodeShort":      "tënant",
		"htmlLong":          strings.Repeat("<&>", 100),
		"u2028Long":         strings.Repeat("\u2028", 100),
	}
}

func TestReview29HTTPQueryScope(t *testing.T) {
	for name, sc := range a29Scopes() {
		for _, useOpt := range []bool{true, false} {
			for _, rec := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/opt=%v/rec=%v", name, useOpt, rec), func(t *testing.T) {
					a29ScopeRun(t, sc, useOpt, rec)
				})
			}
		}
	}
}

// The handler's context carries a scope from an outer auth middleware and
// the Scope option names another: handler and query must agree.
func TestReview29HTTPScopeOptionVsContext(t *testing.T) {
	for _, rec := range []bool{false, true} {
		t.Run(fmt.Sprint(rec), func(t *testing.T) {
			store := memstore.New()
			c := &a29Charges{charges: map[string]string{}}
			mw := func(rt *runtime.Runtime) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("POST /charges", c.handler)
				return idemhttp.Middleware(rt, idemhttp.Query("POST /charges", c.query, runtime.QueryOptions{}),
					idemhttp.Scope(func(r *http.Request) string { return "opt-tenant" }))(mux)
			}
			rt, _ := runtime.New(store)
			h := mw(rt)
			post := func() (int, string) {
				r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":7}`))
				r.Header.Set("Idempotency-Key", "k1")
				r = r.WithContext(runtime.WithScope(r.Context(), "ctx-tenant"))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code, w.Body.String()
			}
			post()
			if rec {
				rrt, _ := runtime.New(store)
				mw(rrt)
				r, _ := runtime.NewReconciler(rrt)
				r.RunOnce(context.Background())
			}
			s, body := post()
			if c.runs != 1 || s != http.StatusCreated || body != "ch_1" {
				t.Fatalf("retry: %d %q, handler ran %d times; charges %q; queries saw %q", s, body, c.runs, c.charges, c.seen)
			}
		})
	}
}

func a29Serve(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func a29Compare(t *testing.T, first, dup *httptest.ResponseRecorder, runs int) {
	t.Helper()
	if runs != 1 {
		t.Errorf("handler ran %d times", runs)
	}
	if dup.Code != first.Code {
		t.Errorf("status %d, first %d", dup.Code, first.Code)
	}
	if dup.Body.String() != first.Body.String() {
		t.Errorf("body %q, first %q", dup.Body.String(), first.Body.String())
	}
	fh, dh := first.Result().Header, dup.Result().Header
	for k, v := range fh {
		if k == "Date" {
			continue
		}
		if fmt.Sprintf("%q", dh[k]) != fmt.Sprintf("%q", v) {
			t.Errorf("header %q: replay %q, first %q", k, dh[k], v)
		}
	}
	for k, v := range dh {
		if _, ok := fh[k]; !ok && k != "Idempotent-Replayed" {
			t.Errorf("header %q only in replay: %q", k, v)
		}
	}
}

func TestReview29HTTPReplayHeaders(t *testing.T) {
	cases := map[string]func(h http.Header){
		"nulPrefix":       func(h http.Header) { h.Set("X-Nul", "\x00abc") },
		"nulB64Lookalike": func(h http.Header) { h.Set("X-Nul", "\x00aGVsbG8=") },
		"nulOnly":         func(h http.Header) { h.Set("X-Nul", "\x00") },
		"obsText":         func(h http.Header) { h.Set("Content-Disposition", "attachment; filename=\"caf\xe9.txt\"") },
		"obsTextNul":      func(h http.Header) { h.Set("X-Mixed", "\x00caf\xe9") },
		"fffd":            func(h http.Header) { h.Set("X-R", "\ufffd") },
		"empty":           func(h http.Header) { h["X-Empty"] = []string{""}; h["X-Empties"] = []string{"", ""} },
		"emptySlice":      func(h http.Header) { h["X-Zero"] = []string{} },
		"multi":           func(h http.Header) { h["X-Multi"] = []string{"a", "", "b", "a"} },
		"spaces":          func(h http.Header) { h.Set("X-Space", "  padded \t ") },
		"nilCT":           func(h http.Header) { h["Content-Type"] = nil },
		"nilOther":        func(h http.Header) { h["X-Nil"] = nil },
		"oddName":         func(h http.Header) { h["x_under score"] = []string{"v"}; h[""] = []string{"noname"} },
		"jsonish":         func(h http.Header) { h.Set("X-J", `{"a":null}`); h.Set("X-Null", "null") },
		"lsep":            func(h http.Header) { h.Set("X-L", "\u2028<&>") },
		"longValue":       func(h http.Header) { h.Set("X-Long", strings.Repeat("v", 70000)) },
		"ctrl":            func(h http.Header) { h.Set("X-Ctrl", "a\x01b\x7f") },
	}
	for name, set := range cases {
		for _, status := range []int{200, 201, 422} {
			t.Run(fmt.Sprintf("%s/%d", name, status), func(t *testing.T) {
				rt, _ := runtime.New(memstore.New())
				runs := 0
				h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs++
					set(w.Header())
					w.WriteHeader(status)
					io.WriteString(w, "body")
				}))
				first := a29Serve(h, "k1")
				dup := a29Serve(h, "k1")
				a29Compare(t, first, dup, runs)
			})
		}
	}
}

// On the wire, byte for byte.
func TestReview29HTTPReplayWire(t *testing.T) {
	cases := map[string]func(h http.Header){
		"obsNul": func(h http.Header) { h.Set("X-Mixed", "\x00caf\xe9"); h.Set("X-N", "\x00aGVsbG8=") },
		"nilCT":  func(h http.Header) { h["Content-Type"] = nil },
		"ctrl":   func(h http.Header) { h.Set("X-Ctrl", "a\x01b\x7f") },
		"crlf":   func(h http.Header) { h.Set("X-Crlf", "a\r\nb") },
		"spaces": func(h http.Header) { h.Set("X-Space", "  padded \t ") },
		"cl":     func(h http.Header) { h.Set("Content-Length", "4") },
		"te":     func(h http.Header) { h.Set("Content-Encoding", "identity") },
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			rt, _ := runtime.New(memstore.New())
			runs := 0
			srv := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				set(w.Header())
				w.WriteHeader(201)
				io.WriteString(w, "body")
			})))
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			first := a29Raw(t, addr, "k1")
			dup := a29Raw(t, addr, "k1")
			if first != dup || runs != 1 {
				t.Errorf("runs %d\nfirst:\n%q\nreplay:\n%q", runs, first, dup)
			}
		})
	}
}

type a29Limited struct {
	*memstore.Store
	limit int
}

func (s *a29Limited) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if len(p.Request) > 1<<20 {
		return runtime.ClaimResult{}, fmt.Errorf("limited: %w", runtime.ErrTooLarge)
	}
	return s.Store.Claim(ctx, p)
}

func (s *a29Limited) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response)+len(p.Note) > s.limit {
		return 0, fmt.Errorf("limited: %w", runtime.ErrTooLarge)
	}
	return s.Store.Transition(ctx, p)
}

func TestReview29HTTPSizeRule(t *testing.T) {
	for _, limit := range []int{0, 1, 16, 40, 64, 100, 200, 1000} {
		for _, status := range []int{200, 201, 204, 302, 400, 404, 409, 410, 422, 500, 501, 503} {
			for _, bodyLen := range []int{0, 10, 5000} {
				t.Run(fmt.Sprintf("limit=%d/status=%d/body=%d", limit, status, bodyLen), func(t *testing.T) {
					rt, _ := runtime.New(&a29Limited{memstore.New(), limit})
					runs := 0
					body := strings.Repeat("e", bodyLen)
					if status == 204 {
						body = ""
					}
					h := idemhttp.Middleware(rt, idemhttp.RetryableStatus(func(s int) bool { return s == 503 }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						runs++
						w.Header().Set("X-Big", strings.Repeat("h", 300))
						w.WriteHeader(status)
						io.WriteString(w, body)
					}))
					first := a29Serve(h, "k1")
					if first.Code != status || first.Body.String() != body {
						t.Fatalf("first: %d", first.Code)
					}
					dup := a29Serve(h, "k1")
					if status == 503 {
						return // released: runs again
					}
					if runs != 1 {
						t.Fatalf("handler ran %d times; dup %d %s", runs, dup.Code, dup.Body.String())
					}
					if dup.Code == status && dup.Body.String() == body {
						return
					}
					if dup.Code != http.StatusGone {
						t.Fatalf("dup: %d %q (first %d)", dup.Code, dup.Body.String(), status)
					}
					d := dup.Body.String()
					if status >= 300 && strings.Contains(d, "succeeded") {
						t.Fatalf("a %d replayed as success: %s", status, d)
					}
					if strings.Contains(d, "answered ") && !strings.Contains(d, fmt.Sprintf("answered %d", status)) {
						t.Fatalf("wrong status in detail: %s (first %d)", d, status)
					}
					if status >= 400 && !strings.Contains(d, "was answered") {
						t.Fatalf("a %d replayed as not-replayable without saying so: %s", status, d)
					}
				})
			}
		}
	}
}

// The size rule applied to what a query converges a 504 to.
func TestReview29HTTPSizeRuleQuery(t *testing.T) {
	for _, limit := range []int{1, 40, 100, 400} {
		for _, qs := range []int{201, 404, 422, 501} {
			for _, outcome := range []runtime.Outcome{runtime.OutcomeSucceeded, runtime.OutcomeFailed} {
				for _, rec := range []bool{false, true} {
					t.Run(fmt.Sprintf("limit=%d/q=%d/out=%v/rec=%v", limit, qs, outcome, rec), func(t *testing.T) {
						store := &a29Limited{memstore.New(), limit}
						runs := 0
						body := strings.Repeat("q", 3000)
						q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
							if outcome == runtime.OutcomeFailed {
								return idemhttp.Response{}, outcome, runtime.Permanent(fmt.Errorf("declined %d: %s", qs, body))
							}
							return idemhttp.Response{Status: qs, Header: http.Header{"X-Q": {body}}, Body: []byte(body)}, outcome, nil
						}
						mw := func(rt *runtime.Runtime) http.Handler {
							mux := http.NewServeMux()
							mux.HandleFunc("POST /x", func(w http.ResponseWriter, r *http.Request) {
								runs++
								w.WriteHeader(http.StatusGatewayTimeout)
							})
							return idemhttp.Middleware(rt, idemhttp.Query("POST /x", q, runtime.QueryOptions{}))(mux)
						}
						rt, _ := runtime.New(store)
						h := mw(rt)
						a29Serve(h, "k1")
						if rec {
							rrt, _ := runtime.New(store)
							mw(rrt)
							r, _ := runtime.NewReconciler(rrt)
							st, err := r.RunOnce(context.Background())
							t.Logf("rec %+v %v", st, err)
						}
						dup := a29Serve(h, "k1")
						d := dup.Body.String()
						t.Logf("dup %d %.300s", dup.Code, d)
						if runs != 1 {
							t.Fatalf("ran %d", runs)
						}
						if dup.Code >= 200 && dup.Code < 300 && (qs >= 300 || outcome == runtime.OutcomeFailed) {
							t.Fatalf("failure replayed as success: %d", dup.Code)
						}
						if dup.Code == http.StatusGone && (qs >= 300 || outcome == runtime.OutcomeFailed) && strings.Contains(d, "succeeded") {
							t.Fatalf("failure replayed as 'succeeded': %s", d)
						}
					})
				}
			}
		}
	}
}

// a29Raw POSTs one request over a raw connection and returns the response
// as it came on the wire, less the lines that differ between a first answer
// and its replay by design (Date, Idempotent-Replayed).
func a29Raw(t *testing.T, addr, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "POST /charge HTTP/1.1\r\nHost: " + addr + "\r\nIdempotency-Key: " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\r\n") {
		if strings.HasPrefix(line, "Date: ") || strings.HasPrefix(line, idemhttp.ReplayedHeader+": ") {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\r\n")
}
