package idemhttp_test

// Regression tests for issue 12, one per numbered problem. They use only the
// API that existed before the issue, so that each can be run on the code
// before the fix (where each fails).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// limitStore refuses requests and responses over max bytes with
// runtime.ErrTooLarge, as pgstore and redisstore do at 1 MiB.
type limitStore struct {
	runtime.Store
	max int
}

func (s limitStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if len(p.Request) > s.max {
		return runtime.ClaimResult{}, fmt.Errorf("%w: request is %d bytes", runtime.ErrTooLarge, len(p.Request))
	}
	return s.Store.Claim(ctx, p)
}

func (s limitStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response) > s.max {
		return 0, fmt.Errorf("%w: response is %d bytes", runtime.ErrTooLarge, len(p.Response))
	}
	return s.Store.Transition(ctx, p)
}

// failingStore fails every claim with an error naming internals.
type failingStore struct{ runtime.Store }

func (failingStore) Claim(context.Context, runtime.ClaimParams) (runtime.ClaimResult, error) {
	return runtime.ClaimResult{}, errors.New("dial tcp secret-db-host:5432: connection refused")
}

// harness is a server with the middleware around handler h (a mux or a
// plain handler), on store.
type harness struct {
	*httptest.Server
	rt   *runtime.Runtime
	runs atomic.Int32
}

func newHarness(t *testing.T, store runtime.Store, rtOpts []runtime.Option, h func(hs *harness) http.Handler, opts ...idemhttp.Option) *harness {
	t.Helper()
	rt, err := runtime.New(store, rtOpts...)
	if err != nil {
		t.Fatal(err)
	}
	hs := &harness{rt: rt}
	opts = append([]idemhttp.Option{idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") })}, opts...)
	hs.Server = httptest.NewServer(idemhttp.Middleware(rt, opts...)(h(hs)))
	t.Cleanup(hs.Close)
	return hs
}

// muxOf routes pattern to f on a ServeMux, counting runs.
func muxOf(pattern string, f func(w http.ResponseWriter, r *http.Request, n int32)) func(hs *harness) http.Handler {
	return func(hs *harness) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { f(w, r, hs.runs.Add(1)) })
		return mux
	}
}

type req struct {
	method, path string
	keys         []string // one Idempotency-Key field each; nil: none
	tenant, body string
}

func (hs *harness) do(t *testing.T, rq req) result {
	t.Helper()
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.path == "" {
		rq.path = "/charges"
	}
	r, err := http.NewRequest(rq.method, hs.URL+rq.path, strings.NewReader(rq.body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range rq.keys {
		r.Header.Add(idemhttp.DefaultHeader, k)
	}
	r.Header.Set("X-Tenant", rq.tenant)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func keys(k ...string) []string { return k }

// 1. An empty field, or two fields, is 400 even where a key is optional.
func TestIssue12KeyFieldEmptyOrRepeated(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
	}{
		{"empty field", keys("")},
		{"blank field", keys("   ")},
		{"two fields", keys("k1", "k2")},
		{"two equal fields", keys("k1", "k1")},
		{"list in one field", keys("k1, k2")},
		{"unterminated sf-string", keys(`"k1`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, memstore.New(), nil, muxOf("/charges", charge))
			got := hs.do(t, req{keys: tc.fields, tenant: "acme", body: "{}"})
			if got.status != http.StatusBadRequest || hs.runs.Load() != 0 {
				t.Fatalf("%q: %d %s (handler ran %d times); want 400 and no run", tc.fields, got.status, got.body, hs.runs.Load())
			}
		})
	}
}

// 2. Credentials and per-client headers are never stored nor replayed.
func TestIssue12CredentialHeadersNotReplayed(t *testing.T) {
	never := []string{"Set-Cookie", "Authorization", "Authentication-Info", "Proxy-Authentication-Info", "Www-Authenticate", "Clear-Site-Data"}
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		for _, h := range never {
			w.Header().Set(h, "secret-for-the-first-client")
		}
		w.Header().Set("X-Charge", "kept")
		charge(w, r, n)
	}))
	first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	replay := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	for _, h := range never {
		if first.header.Get(h) == "" {
			t.Errorf("the first client lost %s", h)
		}
		if v := replay.header.Get(h); v != "" {
			t.Errorf("replay carries %s: %q", h, v)
		}
	}
	if replay.status != http.StatusCreated || replay.header.Get("X-Charge") != "kept" || replay.header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay: %d %v", replay.status, replay.header)
	}
}

// 3. A success too large to store reaches its client; duplicates get a
// stable 410, and the handler never runs twice, not after the lease either.
func TestIssue12LargeResponse(t *testing.T) {
	big := strings.Repeat("x", 800<<10) // 800 KiB: over 1 MiB once stored in base64
	hs := newHarness(t, limitStore{memstore.New(), 1 << 20}, []runtime.Option{runtime.WithLease(50 * time.Millisecond)},
		muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, big)
		}))
	first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	if first.status != http.StatusOK || first.body != big {
		t.Fatalf("first: %d, %d bytes; want 200 with the handler's %d bytes", first.status, len(first.body), len(big))
	}
	for i := range 3 {
		time.Sleep(60 * time.Millisecond) // past the lease
		dup := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
		if dup.status != http.StatusGone || !strings.Contains(dup.header.Get("Content-Type"), "problem+json") {
			t.Fatalf("duplicate %d: %d %s; want a stable 410 problem", i, dup.status, dup.body)
		}
	}
	if n := hs.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

// 4. A panicking handler releases the key, its panic reaches net/http (or
// an outer recoverer), and no client ever sees the panic value.
func TestIssue12Panic(t *testing.T) {
	for _, recoverPanics := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithRecoverPanics(%v)", recoverPanics), func(t *testing.T) {
			var caught atomic.Value
			hs := newHarness(t, memstore.New(), []runtime.Option{runtime.WithRecoverPanics(recoverPanics)}, func(hs *harness) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) {
					if n := hs.runs.Add(1); n == 1 {
						panic("secret-panic-value")
					} else {
						charge(w, r, n)
					}
				})
				return mux
			})
			outer := hs.Config.Handler
			hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() {
					if v := recover(); v != nil {
						caught.Store(v)
						http.Error(w, "internal error", http.StatusInternalServerError)
					}
				}()
				outer.ServeHTTP(w, r)
			})
			first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
			if v := caught.Load(); v != "secret-panic-value" {
				t.Fatalf("the outer recoverer caught %v; want the handler's panic re-raised", v)
			}
			retry := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
			for _, got := range []result{first, retry} {
				if strings.Contains(got.body, "secret-panic-value") {
					t.Fatalf("a client saw the panic value: %d %s", got.status, got.body)
				}
			}
			if retry.status != http.StatusCreated || hs.runs.Load() != 2 {
				t.Fatalf("retry after the panic: %d %s (runs %d); want the key released and the handler run again", retry.status, retry.body, hs.runs.Load())
			}
		})
	}
}

// 5. Streaming: the writer is a Flusher with Unwrap, a flush passes the
// response through at once, and the record says it cannot be replayed.
func TestIssue12Streaming(t *testing.T) {
	read := make(chan struct{})
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		if _, ok := w.(http.Flusher); !ok {
			http.Error(w, "not a Flusher", http.StatusTeapot)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
			http.Error(w, "SetWriteDeadline: "+err.Error(), http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		if err := rc.Flush(); err != nil {
			http.Error(w, "Flush: "+err.Error(), http.StatusTeapot)
			return
		}
		select {
		case <-read:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}))
	r, _ := http.NewRequest(http.MethodPost, hs.URL+"/charges", strings.NewReader("{}"))
	r.Header.Set(idemhttp.DefaultHeader, "k1")
	r.Header.Set("X-Tenant", "acme")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if resp.StatusCode != http.StatusOK || err != nil || line != "data: one\n" {
		rest, _ := io.ReadAll(br)
		t.Fatalf("streamed: %d %q%s (%v); want the first event before the handler finished", resp.StatusCode, line, rest, err)
	}
	close(read)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest of the stream: %q", rest)
	}
	dup := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
	if dup.status != http.StatusGone || hs.runs.Load() != 1 {
		t.Fatalf("duplicate of a streamed response: %d %s (runs %d); want 410 and one run", dup.status, dup.body, hs.runs.Load())
	}
}

// 6. The operation is the route pattern (a key reused on another resource
// of the route is 422) or a fixed-size digest of a long path.
func TestIssue12Operation(t *testing.T) {
	long := "/charges/" + strings.Repeat("a", 300)
	tests := []struct {
		name    string
		handler func(hs *harness) http.Handler
		first   string
		second  string
		want    int
		runs    int32
	}{
		{"long path, no pattern, replayed", plain, long, long, http.StatusCreated, 1},
		{"long path on a pattern, replayed", muxOf("POST /charges/{id}", charge), long, long, http.StatusCreated, 1},
		{"same route, another resource", muxOf("POST /charges/{id}", charge), "/charges/a", "/charges/b", http.StatusUnprocessableEntity, 1},
		{"same route, another query", muxOf("POST /charges/{id}", charge), "/charges/a?x=1", "/charges/a?x=2", http.StatusUnprocessableEntity, 1},
		{"no pattern: each path is its own operation", plain, "/charges/a", "/charges/b", http.StatusCreated, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, memstore.New(), nil, tc.handler)
			first := hs.do(t, req{path: tc.first, keys: keys("k1"), tenant: "acme", body: "{}"})
			if first.status != http.StatusCreated {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			second := hs.do(t, req{path: tc.second, keys: keys("k1"), tenant: "acme", body: "{}"})
			if second.status != tc.want || hs.runs.Load() != tc.runs {
				t.Fatalf("second: %d %s (runs %d); want %d and %d runs", second.status, second.body, hs.runs.Load(), tc.want, tc.runs)
			}
		})
	}
}

func plain(hs *harness) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { charge(w, r, hs.runs.Add(1)) })
}

// 7. 1xx responses pass through; the final status is the one recorded.
func TestIssue12EarlyHints(t *testing.T) {
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Link", "</receipt.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		charge(w, r, n)
	}))
	send := func() (result, []int) {
		var got1xx []int
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { got1xx = append(got1xx, code); return nil },
		})
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/charges", strings.NewReader("{}"))
		r.Header.Set(idemhttp.DefaultHeader, "k1")
		r.Header.Set("X-Tenant", "acme")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{resp.StatusCode, resp.Header, string(b)}, got1xx
	}
	first, hints := send()
	if first.status != http.StatusCreated || len(hints) != 1 || hints[0] != http.StatusEarlyHints {
		t.Fatalf("first: %d %s, 1xx %v; want 103 then 201", first.status, first.body, hints)
	}
	replay, _ := send()
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %s; want the recorded 201", replay.status, replay.body)
	}
}

// 8. Errors the middleware writes are RFC 9457 problems with no internals;
// a store outage is 503 with Retry-After.
func TestIssue12Problems(t *testing.T) {
	const key = "secret-key-1"
	tests := []struct {
		name       string
		store      runtime.Store
		setup      []req // sent first, in the background when inFlight
		inFlight   bool
		rq         req
		want       int
		retryAfter bool
	}{
		{"store outage", failingStore{memstore.New()}, nil, false, req{keys: keys(key), body: "{}"}, http.StatusServiceUnavailable, true},
		{"key missing", memstore.New(), nil, false, req{body: "{}"}, http.StatusBadRequest, false},
		{"key invalid", memstore.New(), nil, false, req{keys: keys("secret key"), body: "{}"}, http.StatusBadRequest, false},
		{"body too large", memstore.New(), nil, false, req{keys: keys(key), body: strings.Repeat("x", 2<<20)}, http.StatusRequestEntityTooLarge, false},
		{"key reused", memstore.New(), []req{{keys: keys(key), body: "{}"}}, false, req{keys: keys(key), body: `{"other":1}`}, http.StatusUnprocessableEntity, false},
		{"in flight", memstore.New(), []req{{path: "/slow", keys: keys(key), body: "{}"}}, true, req{path: "/slow", keys: keys(key), body: "{}"}, http.StatusConflict, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var block chan struct{}
			hs := newHarness(t, tc.store, []runtime.Option{runtime.WithMaxWait(20 * time.Millisecond)}, func(hs *harness) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) { charge(w, r, hs.runs.Add(1)) })
				mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { hs.runs.Add(1); <-block })
				return mux
			}, idemhttp.Required(true))
			block = make(chan struct{})
			t.Cleanup(func() { close(block) }) // before the server closes
			for _, s := range tc.setup {
				if tc.inFlight {
					go func() {
						r, _ := http.NewRequest(http.MethodPost, hs.URL+s.path, strings.NewReader(s.body))
						r.Header.Set(idemhttp.DefaultHeader, s.keys[0])
						if resp, err := http.DefaultClient.Do(r); err == nil {
							resp.Body.Close()
						}
					}()
					for hs.runs.Load() == 0 {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				hs.do(t, s)
			}
			got := hs.do(t, tc.rq)
			if got.status != tc.want {
				t.Fatalf("%d %s; want %d", got.status, got.body, tc.want)
			}
			if ct := got.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q; want application/problem+json", ct)
			}
			if !strings.Contains(got.body, fmt.Sprintf(`"status":%d`, tc.want)) || !strings.Contains(got.body, `"type":`) {
				t.Errorf("body is not a problem with status %d: %s", tc.want, got.body)
			}
			if (got.header.Get("Retry-After") != "") != tc.retryAfter {
				t.Errorf("Retry-After %q; want one: %v", got.header.Get("Retry-After"), tc.retryAfter)
			}
			for _, internal := range []string{key, "secret", "POST /", "/charges", "/slow", "idem:"} {
				if strings.Contains(got.body, internal) {
					t.Errorf("the body shows %q: %s", internal, got.body)
				}
			}
		})
	}
}

// 9. A body under MaxBody is never refused for the size of its stored copy:
// only its digest is stored.
func TestIssue12BodyUnderMaxBody(t *testing.T) {
	body := strings.Repeat("y", 900<<10) // under the 1 MiB MaxBody; 1.2 MB in base64
	hs := newHarness(t, limitStore{memstore.New(), 1 << 20}, nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","bytes":%d}`, n, len(b))
	}))
	first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: body})
	replay := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: body})
	want := fmt.Sprintf(`{"charge":"ch_1","bytes":%d}`, len(body))
	if first.status != http.StatusCreated || first.body != want || replay.body != want || hs.runs.Load() != 1 {
		t.Fatalf("first %d %s, replay %d %s (runs %d)", first.status, first.body, replay.status, replay.body, hs.runs.Load())
	}
	reused := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: body[1:] + "z"})
	if reused.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, another body of the same size: %d %s", reused.status, reused.body)
	}
}
