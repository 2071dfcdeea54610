package idemhttp_test

import (
	"fmt"
	"io"
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

type server struct {
	*httptest.Server
	runs atomic.Int32
}

func newServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, n int32), rtOpts []runtime.Option, opts ...idemhttp.Option) *server {
	t.Helper()
	rt, err := runtime.New(memstore.New(), rtOpts...)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	mux := http.NewServeMux()
	mux.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) {
		handler(w, r, s.runs.Add(1))
	})
	opts = append([]idemhttp.Option{idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") })}, opts...)
	s.Server = httptest.NewServer(idemhttp.Middleware(rt, opts...)(mux))
	t.Cleanup(s.Close)
	return s
}

func charge(w http.ResponseWriter, r *http.Request, n int32) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":"ch_%d","request":%q}`, n, body)
}

type result struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, s *server, method, key, tenant, body string) result {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+"/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idemhttp.DefaultHeader, key)
	}
	req.Header.Set("X-Tenant", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func TestReplay(t *testing.T) {
	s := newServer(t, charge, nil)
	first := send(t, s, "POST", "k1", "acme", `{"cents":100}`)
	second := send(t, s, "POST", "k1", "acme", `{"cents":100}`)
	if first.status != http.StatusCreated || second.status != http.StatusCreated || first.body != second.body {
		t.Fatalf("first %d %s, second %d %s", first.status, first.body, second.status, second.body)
	}
	if first.header.Get(idemhttp.ReplayedHeader) != "" || second.header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replayed headers: %q, %q", first.header.Get(idemhttp.ReplayedHeader), second.header.Get(idemhttp.ReplayedHeader))
	}
	if second.header.Get("Content-Type") != "application/json" || s.runs.Load() != 1 {
		t.Fatalf("replayed header lost or handler ran %d times", s.runs.Load())
	}
}

func TestStatuses(t *testing.T) {
	s := newServer(t, charge, nil, idemhttp.Required(true), idemhttp.MaxBody(64))
	send(t, s, "POST", "k1", "acme", `{"cents":100}`)
	tests := []struct {
		name           string
		method, key    string
		tenant, body   string
		want           int
		wantBodySubstr string
	}{
		{"key reused with another body", "POST", "k1", "acme", `{"cents":5}`, http.StatusUnprocessableEntity, "#key-reused"},
		{"missing key", "POST", "", "acme", `{}`, http.StatusBadRequest, "#key-missing"},
		{"invalid key", "POST", "has space", "acme", `{}`, http.StatusBadRequest, "#key-invalid"},
		{"body too large", "POST", "k2", "acme", strings.Repeat("x", 65), http.StatusRequestEntityTooLarge, "over 64 bytes"},
		{"other tenant, same key", "POST", "k1", "globex", `{"cents":5}`, http.StatusCreated, "ch_2"},
		{"safe method passes through", "GET", "k1", "acme", ``, http.StatusCreated, "ch_3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := send(t, s, tc.method, tc.key, tc.tenant, tc.body)
			if got.status != tc.want || !strings.Contains(got.body, tc.wantBodySubstr) {
				t.Fatalf("%d %s; want %d containing %q", got.status, got.body, tc.want, tc.wantBodySubstr)
			}
		})
	}
}

func TestServerErrorReleasesKey(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int32) {
				if n == 1 {
					http.Error(w, "database unavailable", status)
					return
				}
				charge(w, r, n)
			}, nil)
			if got := send(t, s, "POST", "k1", "acme", `{}`); got.status != status {
				t.Fatalf("first: %d %s", got.status, got.body)
			}
			if got := send(t, s, "POST", "k1", "acme", `{}`); got.status != http.StatusCreated || s.runs.Load() != 2 {
				t.Fatalf("retry after %d: %d %s (runs %d); want the handler run again", status, got.status, got.body, s.runs.Load())
			}
		})
	}
}

func TestInFlightDuplicate(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int32) {
		close(started)
		<-release
		charge(w, r, n)
	}, []runtime.Option{runtime.WithMaxWait(50 * time.Millisecond)})
	var wg sync.WaitGroup
	wg.Add(1)
	var first result
	go func() { defer wg.Done(); first = send(t, s, "POST", "k1", "acme", `{}`) }()
	<-started
	dup := send(t, s, "POST", "k1", "acme", `{}`)
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") == "" {
		t.Fatalf("duplicate in flight: %d %s, Retry-After %q", dup.status, dup.body, dup.header.Get("Retry-After"))
	}
	close(release)
	wg.Wait()
	if first.status != http.StatusCreated || s.runs.Load() != 1 {
		t.Fatalf("first: %d (runs %d)", first.status, s.runs.Load())
	}
}
