package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// The operation is the route pattern when a pattern pins the route, through
// nested muxes and StripPrefix; otherwise (no pattern, a subtree or a
// catch-all pattern whose handler routes further) it is the request as the
// client sent it, host included, so two resources never share it.
func TestOperationNames(t *testing.T) {
	long := "/charges/" + strings.Repeat("a", 300)
	// op is the handler that reports the operation it ran under.
	op := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := runtime.AttemptFrom(r.Context())
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, a.ID.Operation)
	})
	muxOf := func(pairs ...any) *http.ServeMux {
		m := http.NewServeMux()
		for i := 0; i < len(pairs); i += 2 {
			m.Handle(pairs[i].(string), pairs[i+1].(http.Handler))
		}
		return m
	}
	opaque := func(h http.Handler) http.Handler { // a middleware: no mux the idempotency middleware can see
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) })
	}
	tests := []struct {
		name string
		// server returns the server's handler, given the idempotency
		// middleware.
		server func(mw func(http.Handler) http.Handler) http.Handler
		path   string
		want   string
	}{
		{"around a mux", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("POST /charges/{id}", op))
		}, "/charges/c1", "POST /charges/{id}"},
		{"inside a mux", func(mw func(http.Handler) http.Handler) http.Handler {
			return muxOf("POST /charges/{id}", mw(op))
		}, "/charges/c1", "POST /charges/{id}"},
		{"a pattern without a method", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("/charges/{id}", op))
		}, "/charges/c1", "POST /charges/{id}"},
		{"the root only", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("POST /{$}", op))
		}, "/", "POST /{$}"},
		{"around an outer mux, API mux mounted at /api/", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("/api/", muxOf("POST /api/charges/{id}", op)))
		}, "/api/charges/c1", "POST /api/charges/{id}"},
		{"around an outer mux, host mux behind /", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("/", muxOf("POST a.example/pay", op, "POST b.example/pay", op)))
		}, "/pay", "POST a.example/pay"},
		{"around an outer mux, a mount it cannot see into", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("/api/", opaque(muxOf("POST /api/charges/{id}", op))))
		}, "/api/charges/c1", "POST a.example/api/charges/c1 as sent via /api/"},
		{"around a mux, catch-all pattern", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(muxOf("POST /{rest...}", op))
		}, "/charges/c1", "POST a.example/charges/c1 as sent via POST /{rest...}"},
		{"inside a mux, subtree pattern", func(mw func(http.Handler) http.Handler) http.Handler {
			return muxOf("POST /charges/", mw(op))
		}, "/charges/c1", "POST a.example/charges/c1 as sent via POST /charges/"},
		{"inside a StripPrefix sub-mux", func(mw func(http.Handler) http.Handler) http.Handler {
			return muxOf("/refunds/", http.StripPrefix("/refunds", muxOf("POST /{id}", mw(op))))
		}, "/refunds/r1", "POST /refunds/{id}"},
		{"inside a StripPrefix sub-mux, catch-all pattern", func(mw func(http.Handler) http.Handler) http.Handler {
			return muxOf("/refunds/", http.StripPrefix("/refunds", muxOf("POST /{rest...}", mw(op))))
		}, "/refunds/r1", "POST a.example/refunds/r1 as sent via POST /{rest...}"},
		{"no pattern", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(op)
		}, "/charges/c1", "POST a.example/charges/c1 as sent"},
		{"no pattern, escaped path as sent", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(op)
		}, "/charges/a%2Fb", "POST a.example/charges/a%2Fb as sent"},
		{"no pattern, long path: digested", func(mw func(http.Handler) http.Handler) http.Handler {
			return mw(op)
		}, long, ("POST a.example" + long)[:64] + "…#sha256:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(tc.server(idemhttp.Middleware(rt, quiet())))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader("{}"))
			req.Host = "a.example"
			req.Header.Set(idemhttp.DefaultHeader, "k1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got := string(b)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			ok := got == tc.want
			if strings.HasSuffix(tc.want, "…#sha256:") {
				ok = strings.HasPrefix(got, tc.want) && len(got) == len(tc.want)+64
			}
			if !ok {
				t.Errorf("operation %q; want %q", got, tc.want)
			}
		})
	}
}
