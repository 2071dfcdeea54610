package idemhttp_test

import (
	"bufio"
	"context"
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

// docs/http.md, "One request, many spellings": "an escaped unreserved
// character (letters, digits, -._~): /pay%5Fnow is /pay_now" is the same
// request, "so a retry sent under another spelling replays instead of
// running again or getting 422"; and a sub-mux mounted with
// http.StripPrefix names its operation "as the client sees the route",
// POST /payments/pay_now/{id}.
//
// Schedule: a sub-mux routing "POST /pay_now/{id}" is mounted at
// /payments/ with http.StripPrefix, the middleware around it (or around
// each sub-mux, as issue 16's placements). The client sends
// /payments/pay_now/ch_1, then retries (same key, same body) as
// /payments/p%61y_now/ch_1. ServeMux matches the unescaped segment, so the
// same handler is reached; but the middleware checks the pattern against
// the escaped path that StripPrefix left (matches compares "pay_now" with
// "p%61y_now"), finds it does not match, takes the path for "rewritten
// some other way" and names the operation "POST /pay_now/{id} at
// /payments/pay_now/ch_1", not "POST /payments/pay_now/{id}": another
// identity, and the handler runs again.
func TestR28StripPrefixEscapedSpellingRunsAgain(t *testing.T) {
	for _, placement := range []string{"around the sub-mux", "around each handler"} {
		t.Run(placement, func(t *testing.T) {
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
			switch placement {
			case "around the sub-mux":
				sub.Handle("POST /pay_now/{id}", h)
				root.Handle("/payments/", http.StripPrefix("/payments", mw(sub)))
			default: // inside the sub-mux: r.Pattern names the route
				sub.Handle("POST /pay_now/{id}", mw(h))
				root.Handle("/payments/", http.StripPrefix("/payments", sub))
			}
			srv := httptest.NewServer(root)
			defer srv.Close()
			key := teststores.Unique()
			var ops []string
			for _, path := range []string{"/payments/pay_now/ch_1", "/payments/p%61y_now/ch_1"} {
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
				t.Logf("%s: %d %q", path, resp.StatusCode, b)
				ops = append(ops, fmt.Sprint(resp.StatusCode, " ", string(b)))
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one request spelled two ways (%v): /p%%61y_now is /pay_now (docs/http.md), and the retry must replay", n, ops)
			}
		})
	}
}

// The same mismatch costs the route its query: idemhttp.Query registers
// the route's query under "POST /payments/pay_now/{id}" ("the method and
// the pattern as the client sees the route, prefix included"), and "a
// duplicate that finds the request's record UNKNOWN (the handler answered
// 504, say) ... asks q instead of answering outcome-unknown, and a
// reconciler on the runtime converges the route's records with it".
//
// Schedule: as above, the client sends /payments/p%61y_now/ch_1; the
// handler answers 504 (UNKNOWN). The record's operation is "POST
// /pay_now/{id} at /payments/pay_now/ch_1", which has no query: the
// duplicate answers outcome-unknown without asking, and no reconciler
// (it takes registered operations only) ever converges the record.
func TestR28StripPrefixEscapedSpellingLosesQuery(t *testing.T) {
	// The plain spelling is the control: its duplicate asks the query.
	for _, path := range []string{"/payments/pay_now/ch_1", "/payments/p%61y_now/ch_1"} {
		t.Run(path, func(t *testing.T) { r28StripPrefixQuery(t, "/pay_now/{id}", path) })
	}
}

// r28StripPrefixQuery mounts a sub-mux routing "POST "+route under
// http.StripPrefix("/payments"), with the query registered for the route as
// the client sees it; a handler answering 504 (UNKNOWN) is sent path twice
// under one key, then a reconcile pass runs: the query must be asked.
func r28StripPrefixQuery(t *testing.T, route, path string) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
		asked.Add(1)
		return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charge 1")}, runtime.OutcomeSucceeded, nil
	}
	mw := idemhttp.Middleware(rt, quiet(), idemhttp.Query("POST /payments"+route, q, runtime.QueryOptions{}))
	var runs atomic.Int32
	sub := http.NewServeMux()
	sub.Handle("POST "+route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	root := http.NewServeMux()
	root.Handle("/payments/", http.StripPrefix("/payments", mw(sub)))
	srv := httptest.NewServer(root)
	defer srv.Close()
	key := teststores.Unique()
	var codes []int
	for range 2 {
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
		t.Logf("%d %q", resp.StatusCode, b)
		codes = append(codes, resp.StatusCode)
	}
	rec, err := runtime.NewReconciler(rt)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := rec.RunOnce(context.Background())
	t.Logf("handler runs %d, query asked %d, reconcile pass %+v %v", runs.Load(), asked.Load(), stats, err)
	if asked.Load() == 0 {
		t.Fatalf("the route's registered query was never asked (answers %v, reconcile %+v): the request, spelled %s, was recorded under another operation, with no query", codes, stats, path)
	}
}

// docs/http.md's table: "an internationalised name and its A-label:
// bücher.example is xn--bcher-kva.example", and the Host in any case, on a
// route no pattern pins (a plain handler). Sent on the wire as written
// (Go's client would convert the name itself).
func TestR28IDNAHostSpellingsOnTheWire(t *testing.T) {
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
	for _, host := range []string{"xn--bcher-kva.example", "bücher.example", "BÜCHER.example", "Bücher.Example.:80"} {
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
		t.Fatalf("the handler ran %d times for one host spelled four ways", n)
	}
}
