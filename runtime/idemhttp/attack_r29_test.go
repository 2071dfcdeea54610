package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md, "One request, many spellings": "the case of an escape's
// hex digits: %2f is %2F" and "an escaped unreserved character: /pay%5Fnow
// is /pay_now" are the same request, "so a retry sent under another
// spelling replays instead of running again". Row 25.40 (c): "The
// middleware now matches a literal segment against the path's segment
// unescaped, as ServeMux does".
//
// ServeMux unescapes a pattern's literal segments too ("/a%2Fb/{id}" is the
// literal a/b; "/p%61y_now/{id}" is pay_now). matches compares the
// pattern's segment as written with the path's segment as sent or
// unescaped, never the pattern's unescaped: a literal written with an
// escape matches only the path spelled exactly like the pattern.
//
// Schedule: a sub-mux mounted at /payments/ with http.StripPrefix routes a
// pattern with an escaped literal; the client sends the request, then
// retries (same key, same body) under another spelling ServeMux routes to
// the same handler. The first spelling is named "POST
// /payments/<pattern>", the other is taken for "rewritten some other way"
// ("... at /payments/..."): another identity, and the handler runs again.
func TestR29StripPrefixEscapedPatternRunsAgain(t *testing.T) {
	cases := []struct{ name, pattern, first, retry string }{
		{"reserved-hex-case", "POST /a%2Fb/{id}", "/payments/a%2Fb/ch_1", "/payments/a%2fb/ch_1"},
		{"unreserved-in-pattern", "POST /p%61y_now/{id}", "/payments/p%61y_now/ch_1", "/payments/pay_now/ch_1"},
	}
	for _, c := range cases {
		for _, placement := range []string{"around the sub-mux", "around each handler"} {
			t.Run(c.name+"/"+placement, func(t *testing.T) {
				rt, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int32
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "charge %d", runs.Add(1))
				})
				mw := idemhttp.Middleware(rt, quiet())
				sub := http.NewServeMux()
				root := http.NewServeMux()
				if placement == "around the sub-mux" {
					sub.Handle(c.pattern, h)
					root.Handle("/payments/", http.StripPrefix("/payments", mw(sub)))
				} else {
					sub.Handle(c.pattern, mw(h))
					root.Handle("/payments/", http.StripPrefix("/payments", sub))
				}
				srv := httptest.NewServer(root)
				defer srv.Close()
				key := teststores.Unique()
				var got []string
				for _, path := range []string{c.first, c.retry} {
					req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"cents":100}`))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set(idemhttp.DefaultHeader, key)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					t.Logf("%s (sent as %s): %d %q", path, req.URL.EscapedPath(), resp.StatusCode, b)
					got = append(got, fmt.Sprint(resp.StatusCode, " ", string(b)))
				}
				if n := runs.Load(); n != 1 {
					t.Fatalf("the handler behind %q ran %d times for one request spelled two ways (%v); docs/http.md says the retry replays", c.pattern, n, got)
				}
			})
		}
	}
}

// The same mismatch costs the route its query ("a duplicate that finds the
// request's record UNKNOWN ... asks q", and the reconciler converges the
// route's records with it). Schedule: the query is registered for "POST
// /payments/a%2Fb/{id}"; the handler answers 504 (UNKNOWN) to a request
// spelled /payments/a%2fb/ch_1, then the duplicate, then a reconcile pass.
// The upper-case spelling is the control.
func TestR29StripPrefixEscapedPatternLosesQuery(t *testing.T) {
	for _, path := range []string{"/payments/a%2Fb/ch_1", "/payments/a%2fb/ch_1"} {
		t.Run(path, func(t *testing.T) { r28StripPrefixQuery(t, "/a%2Fb/{id}", path) })
	}
}

// docs/http.md's table, on a route no pattern pins (a plain handler): "in
// the host, %61pi.example is api.example", "the scheme's default port",
// "Host in any case", "a trailing dot". Sent on the wire as written.
func TestR29HeldHostSpellingsOnTheWire(t *testing.T) {
	for _, hosts := range [][]string{
		{"api.example", "%61pi.example", "%61PI.example.:80"},
		{"[::1]", "[::1]:80"},
		{"[2001:db8::a]", "[2001:DB8::A]"},
	} {
		t.Run(hosts[0], func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "charge %d", runs.Add(1))
			})
			srv := httptest.NewServer(idemhttp.Middleware(rt, quiet())(h))
			defer srv.Close()
			key := teststores.Unique()
			for _, host := range hosts {
				conn, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				body := `{"cents":100}`
				fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", host, key, len(body), body)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				conn.Close()
				t.Logf("Host %s: %d %q", host, resp.StatusCode, b)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one host spelled %d ways %v", n, len(hosts), hosts)
			}
		})
	}
}
