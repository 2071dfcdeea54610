package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
)

// Items 3 and 9 on the real stores (PostgreSQL, Redis, Redis Cluster), whose
// record limit is 1 MiB: a response
// over 1 MiB reaches its client once and duplicates get a stable 410, and a
// 900 KiB request body (1.2 MB in base64) is accepted.
func TestIssue12LargeOnStores(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			big := strings.Repeat("r", 1<<20+1)
			hs := newHarness(t, st.New(t), nil, func(hs *harness) http.Handler {
				mux := http.NewServeMux()
				mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
					hs.runs.Add(1)
					_, _ = io.WriteString(w, big)
				})
				mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"upload":%d,"bytes":%d}`, hs.runs.Add(1), len(b))
				})
				return mux
			})
			tenant := teststores.Unique()
			first := hs.do(t, req{path: "/report", keys: keys("r1"), tenant: tenant})
			if first.status != http.StatusOK || first.body != big {
				t.Fatalf("first: %d, %d bytes", first.status, len(first.body))
			}
			want := http.StatusGone // the memory store has no limit: it replays
			if st.Name == "memory" {
				want = http.StatusOK
			}
			for range 2 {
				if dup := hs.do(t, req{path: "/report", keys: keys("r1"), tenant: tenant}); dup.status != want {
					t.Fatalf("duplicate: %d %.200s; want %d", dup.status, dup.body, want)
				}
			}
			body := strings.Repeat("u", 900<<10)
			up := hs.do(t, req{path: "/upload", keys: keys("u1"), tenant: tenant, body: body})
			again := hs.do(t, req{path: "/upload", keys: keys("u1"), tenant: tenant, body: body})
			if up.status != http.StatusCreated || again.body != up.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("upload: %d %s, replay %d %s", up.status, up.body, again.status, again.body)
			}
			if n := hs.runs.Load(); n != 2 {
				t.Fatalf("handlers ran %d times; want 2", n)
			}
		})
	}
}
