package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// The README's curl session, step by step.
func TestSession(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	srv := httptest.NewServer(newHandler(rt, l))
	defer srv.Close()
	steps := []struct {
		name, key, account, body string
		status                   int
		contains                 string
		replayed                 bool
	}{
		{"charge", "k-100", "acme", `{"cents":1000}`, http.StatusCreated, `"id":"ch_001"`, false},
		{"retry", "k-100", "acme", `{"cents":1000}`, http.StatusCreated, `"id":"ch_001"`, true},
		{"same key, other amount", "k-100", "acme", `{"cents":5}`, http.StatusUnprocessableEntity, `#key-reused`, false},
		{"same key, other account", "k-100", "globex", `{"cents":1000}`, http.StatusCreated, `"id":"ch_002"`, false},
		{"no key", "", "acme", `{"cents":1000}`, http.StatusBadRequest, `#key-missing`, false},
	}
	for _, s := range steps {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(s.body))
		if s.key != "" {
			req.Header.Set("Idempotency-Key", s.key)
		}
		req.Header.Set("X-Account", s.account)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status || !strings.Contains(string(b), s.contains) || (resp.Header.Get("Idempotent-Replayed") == "true") != s.replayed {
			t.Errorf("%s: %d %s (replayed %q); want %d with %q", s.name, resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed"), s.status, s.contains)
		}
	}
	if n := len(l.charges); n != 2 {
		t.Fatalf("%d charges; want 2", n)
	}
}
