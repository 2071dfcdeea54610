package idemhttp_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

func quiet() idemhttp.Option { return idemhttp.Logger(slog.New(slog.DiscardHandler)) }

func TestHeaderPolicy(t *testing.T) {
	handler := muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Set-Cookie", "session=1")
		w.Header().Set("X-Trace", "t1")
		w.Header().Set("X-Keep", "k")
		w.Header().Set(http.TrailerPrefix+"X-Checksum", "c")
		charge(w, r, n)
	})
	tests := []struct {
		name    string
		opts    []idemhttp.Option
		want    []string
		notWant []string
	}{
		{"default denylist", nil, []string{"X-Trace", "X-Keep", "Content-Type"}, []string{"Set-Cookie", "X-Checksum"}},
		{"DropHeaders", []idemhttp.Option{idemhttp.DropHeaders("x-trace")}, []string{"X-Keep", "Content-Type"}, []string{"Set-Cookie", "X-Trace"}},
		{"AllowHeaders", []idemhttp.Option{idemhttp.AllowHeaders("X-Keep", "Set-Cookie")}, []string{"X-Keep", "Content-Type"}, []string{"Set-Cookie", "X-Trace"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, memstore.New(), nil, handler, append(tc.opts, quiet())...)
			first := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
			replay := hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"})
			if first.header.Get("Set-Cookie") == "" || first.header.Get("X-Trace") == "" {
				t.Fatalf("the first client lost headers: %v", first.header)
			}
			for _, h := range tc.want {
				if replay.header.Get(h) == "" {
					t.Errorf("replay lacks %s: %v", h, replay.header)
				}
			}
			for _, h := range tc.notWant {
				if replay.header.Get(h) != "" {
					t.Errorf("replay has %s: %v", h, replay.header)
				}
			}
		})
	}
}

func TestKeyForms(t *testing.T) {
	tests := []struct {
		name        string
		first, then string
		want        int
	}{
		{"sf-string and bare are one key", `"k-1"`, `k-1`, http.StatusCreated},
		{"escapes", `"a\"b\\c"`, `a"b\c`, http.StatusBadRequest}, // a bare key must not contain quotes
		{"escaped sf-string replayed", `"a\"b\\c"`, `"a\"b\\c"`, http.StatusCreated},
		{"data after the sf-string", `"k"`, `"k";x`, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHarness(t, memstore.New(), nil, muxOf("/charges", charge), quiet())
			first := hs.do(t, req{keys: keys(tc.first), tenant: "acme", body: "{}"})
			then := hs.do(t, req{keys: keys(tc.then), tenant: "acme", body: "{}"})
			if first.status != http.StatusCreated || then.status != tc.want {
				t.Fatalf("first %d %s, then %d %s; want 201, %d", first.status, first.body, then.status, then.body, tc.want)
			}
			if tc.want == http.StatusCreated && (then.body != first.body || hs.runs.Load() != 1) {
				t.Fatalf("not replayed: %s / %s", first.body, then.body)
			}
		})
	}
}

func TestProblemBase(t *testing.T) {
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", charge), quiet(), idemhttp.Required(true), idemhttp.ProblemBase("https://api.example.com/problems/"))
	got := hs.do(t, req{tenant: "acme", body: "{}"})
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(got.body), &p); err != nil || p.Type != "https://api.example.com/problems/key-missing" || p.Status != 400 {
		t.Fatalf("%d %s (%v)", got.status, got.body, err)
	}
}

// A streamed 5xx still releases the key; a hijacked connection counts as
// streamed.
func TestStreamedVariants(t *testing.T) {
	hs := newHarness(t, memstore.New(), nil, func(hs *harness) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) {
			if hs.runs.Add(1) == 1 {
				w.WriteHeader(http.StatusBadGateway)
				http.NewResponseController(w).Flush()
				return
			}
			_, _ = io.WriteString(w, "ok")
		})
		mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
			hs.runs.Add(1)
			c, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusTeapot)
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			_ = buf.Flush()
			_ = c.Close()
		})
		return mux
	}, quiet())
	if got := hs.do(t, req{path: "/flaky", keys: keys("f"), tenant: "a"}); got.status != http.StatusBadGateway {
		t.Fatalf("streamed 502: %d", got.status)
	}
	if got := hs.do(t, req{path: "/flaky", keys: keys("f"), tenant: "a"}); got.status != http.StatusOK || got.body != "ok" {
		t.Fatalf("retry after a streamed 502: %d %s", got.status, got.body)
	}
	if got := hs.do(t, req{path: "/hijack", keys: keys("h"), tenant: "a"}); got.status != http.StatusOK || got.body != "hi" {
		t.Fatalf("hijacked: %d %s", got.status, got.body)
	}
	if got := hs.do(t, req{path: "/hijack", keys: keys("h"), tenant: "a"}); got.status != http.StatusGone || !strings.Contains(got.body, "streamed") {
		t.Fatalf("duplicate of a hijacked response: %d %s", got.status, got.body)
	}
	if n := hs.runs.Load(); n != 3 {
		t.Fatalf("runs %d; want 3", n)
	}
}

// Inside a ServeMux (around one handler) the operation is r.Pattern; a long
// custom operation name is digested, not refused.
func TestOperationInsideMux(t *testing.T) {
	rt := newRuntime(t)
	var runs atomic.Int32
	mw := idemhttp.Middleware(rt, quiet())
	long := idemhttp.Middleware(rt, quiet(), idemhttp.Operation(func(r *http.Request) string { return strings.Repeat("op", 200) }))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { charge(w, r, runs.Add(1)) })
	mux := http.NewServeMux()
	mux.Handle("POST /charges/{id}", mw(h))
	mux.Handle("POST /custom/{id}", long(h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	hs := &harness{Server: srv}
	tests := []struct {
		path string
		want int
	}{
		{"/charges/a", http.StatusCreated},
		{"/charges/a", http.StatusCreated},             // replayed
		{"/charges/b", http.StatusUnprocessableEntity}, // same route, another resource
		{"/custom/a", http.StatusCreated},              // long custom operation, digested
		{"/custom/a", http.StatusCreated},              // replayed
	}
	for _, tc := range tests {
		if got := hs.do(t, req{path: tc.path, keys: keys("k1"), body: "{}"}); got.status != tc.want {
			t.Fatalf("%s: %d %s; want %d", tc.path, got.status, got.body, tc.want)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times; want 2", n)
	}
}

// Concurrent duplicates wait for the first and share its one run.
func TestConcurrentDuplicates(t *testing.T) {
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", func(w http.ResponseWriter, r *http.Request, n int32) {
		time.Sleep(50 * time.Millisecond)
		charge(w, r, n)
	}), quiet())
	var wg sync.WaitGroup
	got := make([]result, 8)
	for i := range got {
		wg.Go(func() { got[i] = hs.do(t, req{keys: keys("k1"), tenant: "acme", body: "{}"}) })
	}
	wg.Wait()
	for _, g := range got {
		if g.status != http.StatusCreated || g.body != got[0].body {
			t.Fatalf("%d %s / %s", g.status, g.body, got[0].body)
		}
	}
	if n := hs.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
}

func newRuntime(t *testing.T) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// An outer http.MaxBytesReader's limit is 413, like MaxBody's.
func TestOuterMaxBytesReader(t *testing.T) {
	hs := newHarness(t, memstore.New(), nil, muxOf("/charges", charge), quiet())
	inner := hs.Config.Handler
	hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 8)
		inner.ServeHTTP(w, r)
	})
	if got := hs.do(t, req{keys: keys("k1"), tenant: "a", body: `{"cents":1000}`}); got.status != http.StatusRequestEntityTooLarge || hs.runs.Load() != 0 {
		t.Fatalf("%d %s", got.status, got.body)
	}
}
