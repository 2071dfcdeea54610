package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/mux"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// One request, spelled differently by its clients, is one identity: the
// Host's case, a trailing dot, the scheme's default port, percent-encoded
// unreserved characters in the path and the case of escapes' hex digits
// do not make a second operation or a second fingerprint, so the handler
// runs once. Routes pinned by a ServeMux pattern, routes no pattern pins
// (a plain handler, a hand-written router and gorilla/mux, which set no
// r.Pattern, a catch-all), on every store. Another host or a reserved
// character escaped (%2F is not /) is another request.
func TestIdentitySpellings(t *testing.T) {
	type send struct{ host, path string }
	same := []send{
		{"api.example", "/pay_now/a%2Fb"},
		{"API.Example", "/pay_now/a%2Fb"},
		{"api.example:80", "/pay_now/a%2Fb"},
		{"api.example.", "/pay_now/a%2Fb"},
		{"API.EXAMPLE.:80", "/pay%5Fnow/a%2fb"},
		{"api.example", "/p%61y_now/a%2Fb"},
		{"%61pi.ex%41mple", "/pay_now/a%2Fb"},
	}
	routers := []struct {
		name   string
		router func(h http.Handler) http.Handler
	}{
		{"plain handler", func(h http.Handler) http.Handler { return h }},
		{"hand-written router", func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/pay_now/") {
					h.ServeHTTP(w, r) // as chi or gorilla/mux would: no r.Pattern
					return
				}
				http.NotFound(w, r)
			})
		}},
		{"gorilla/mux router", func(h http.Handler) http.Handler {
			// A real router that sets no r.Pattern (its routes are its own).
			r := mux.NewRouter()
			r.PathPrefix("/pay_now/").Methods(http.MethodPost).Handler(h)
			return r
		}},
		{"ServeMux pattern", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("POST /pay_now/{id}", h)
			return m
		}},
		{"catch-all pattern", func(h http.Handler) http.Handler {
			m := http.NewServeMux()
			m.Handle("POST /{rest...}", h)
			return m
		}},
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, rc := range routers {
				t.Run(rc.name, func(t *testing.T) {
					var runs atomic.Int32
					h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.WriteHeader(http.StatusCreated)
						fmt.Fprintf(w, "charge %d", runs.Add(1))
					})
					scope := idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Tenant") })
					srv := httptest.NewServer(idemhttp.Middleware(rt, quiet(), scope)(rc.router(h)))
					defer srv.Close()
					tenant := teststores.Unique()
					do := func(s send, key string) (int, string) {
						t.Helper()
						req, err := http.NewRequest(http.MethodPost, srv.URL+s.path, strings.NewReader(`{"cents":100}`))
						if err != nil {
							t.Fatal(err)
						}
						req.Host = s.host
						req.Header.Set(idemhttp.DefaultHeader, key)
						req.Header.Set("X-Tenant", tenant)
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						defer resp.Body.Close()
						b, _ := io.ReadAll(resp.Body)
						return resp.StatusCode, string(b)
					}
					for _, s := range same {
						if code, body := do(s, "k1"); code != http.StatusCreated || body != "charge 1" {
							t.Fatalf("%s %s: %d %q; want the first answer, 201 \"charge 1\"", s.host, s.path, code, body)
						}
					}
					if n := runs.Load(); n != 1 {
						t.Fatalf("handler ran %d times for one request spelled %d ways", n, len(same))
					}
					if rc.name == "ServeMux pattern" {
						return // the pattern names the operation: hosts do not enter it
					}
					// Another host, and a reserved character escaped, are
					// other requests (another operation, or with a pattern
					// that pins nothing, another target).
					for _, s := range []send{{"other.example", "/pay_now/a%2Fb"}, {"api.example", "/pay_now%2Fa%2Fb"}} {
						code, _ := do(s, "k1")
						if code == http.StatusNotFound {
							continue // the hand-written router routes by the decoded path
						}
						if code != http.StatusCreated {
							t.Fatalf("%s %s: %d; want 201 from a run of its own", s.host, s.path, code)
						}
					}
				})
			}
		})
	}
}
