package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// One request spelled two ways on the wire, as clients differ (Go's client
// sends a query as written, Python's requests escapes it; a proxy may
// escape a Host's UTF-8): the retry replays, where it got 422 (a byte of
// the query raw, then escaped) or ran the handler again (an escaped UTF-8
// Host beside its A-label, on a route no pattern pins). Found by review
// r42.
func TestIdentityWireSpellings(t *testing.T) {
	type send struct{ host, target string }
	pairs := [][2]send{
		{{"api.example", "/pay?note=caf%C3%A9"}, {"api.example", "/pay?note=caf\u00e9"}},
		{{"api.example", "/pay?ids=%7Ba%7D"}, {"api.example", "/pay?ids={a}"}},
		{{"api.example", "/pay?note=a%7Cb%5e"}, {"api.example", "/pay?note=a|b^"}},
		{{"api.example", "/pay?a=%5B1%5D"}, {"api.example", "/pay?a=[1]"}},
		{{"api.example", "/pay/%5Bx%5D"}, {"api.example", "/pay/[x]"}},
		{{"api.example", "/pay/caf%C3%A9"}, {"api.example", "/pay/caf\u00e9"}},
		{{"xn--bcher-kva.example", "/pay"}, {"b%C3%BCcher.example", "/pay"}},
		{{"B%C3%9CCHER.example.", "/pay"}, {"xn--bcher-kva.example:80", "/pay"}},
	}
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprint("pinned=", pinned), func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				rt, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "charge %d", runs.Add(1))
				})
				if pinned {
					m := http.NewServeMux()
					m.Handle("POST /pay", h)
					m.Handle("POST /pay/{id}", h)
					h = m
				}
				srv := httptest.NewServer(idemhttp.Middleware(rt, quiet())(h))
				defer srv.Close()
				addr := srv.Listener.Addr().String()
				for i, p := range pairs {
					key := fmt.Sprint("k", i)
					before := runs.Load()
					b1 := rawSend(t, addr, "HTTP/1.1", p[0].host, p[0].target, key)
					b2 := rawSend(t, addr, "HTTP/1.1", p[1].host, p[1].target, key)
					if want := fmt.Sprint("charge ", before+1); b1 != want || b2 != b1 || runs.Load() != before+1 {
						t.Errorf("%s %s, then %s %s: %q, then %q (the handler ran %d times); want %q replayed",
							p[0].host, p[0].target, p[1].host, p[1].target, b1, b2, runs.Load()-before, want)
					}
				}
			})
		})
	}
}
