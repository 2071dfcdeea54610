package idemhttp_test

// Adversarial review (h9): attacks on idemhttp's promises through real
// http.Servers on the memory store. Each test fails when the promise is
// broken.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

func reviewRuntime(t *testing.T, opts ...runtime.Option) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(memstore.New(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

type reviewAnswer struct {
	status   int
	body     string
	replayed bool
}

// reviewPost sends a POST with the key, an optional Host and more header
// fields as name, value pairs.
func reviewPost(t *testing.T, url, host, key, body string, header ...string) reviewAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reviewAnswer{resp.StatusCode, string(b), resp.Header.Get(idemhttp.ReplayedHeader) == "true"}
}

// timeoutPlacement serves a handler whose downstream applies the effect and
// whose acknowledgement is slow, so that http.TimeoutHandler answers 503
// while the handler still runs: TimeoutHandler outside the middleware (the
// documented placement) or inside it, around the route's handler (the
// documented hazard). effects counts the handler's runs; done gets one
// value per finished run.
func timeoutPlacement(t *testing.T, outside bool, effects *atomic.Int32, done chan<- struct{}) *httptest.Server {
	t.Helper()
	rt := reviewRuntime(t)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		effects.Add(1)                     // the downstream applied the charge
		time.Sleep(400 * time.Millisecond) // its acknowledgement is slow
		w.WriteHeader(http.StatusCreated)
	})
	mux := http.NewServeMux()
	if outside {
		mux.Handle("POST /charges/{id}", slow)
		return httptest.NewServer(http.TimeoutHandler(idemhttp.Middleware(rt)(mux), 100*time.Millisecond, "timeout"))
	}
	mux.Handle("POST /charges/{id}", http.TimeoutHandler(slow, 100*time.Millisecond, "timeout"))
	return httptest.NewServer(idemhttp.Middleware(rt)(mux))
}

// Promise: "the handler runs at most once per (scope, route as the client
// sees it, key)"; 5xx release the key "except what may have had its
// effect". The middleware cannot see a handler goroutine that the standard
// library's http.TimeoutHandler leaves running when it answers 503, so the
// documented rule (docs/http.md, "TimeoutHandler goes outside") is: put
// TimeoutHandler outside the middleware. Outside, its deadline is the
// request context the middleware sees: the 503 reaches the client, the
// handler finishes and its response is recorded, and the retry is
// replayed; the handler runs once. Inside, its 503 releases the key while
// the handler still runs and the retry runs it again: the documented
// hazard, pinned here so that the documentation changes with it.
func TestReviewHTTPTimeoutHandlerPlacement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outside bool
		runs    int32
	}{
		{"outside the middleware: runs once, the retry replays", true, 1},
		{"inside the middleware: the documented hazard, runs twice", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var effects atomic.Int32
			done := make(chan struct{}, 8)
			srv := timeoutPlacement(t, tc.outside, &effects, done)
			defer srv.Close()

			first := reviewPost(t, srv.URL+"/charges/c1", "", "k-timeouthandler", "{}")
			if first.status != http.StatusServiceUnavailable {
				t.Fatalf("first answer %d, want TimeoutHandler's 503", first.status)
			}
			retry := reviewPost(t, srv.URL+"/charges/c1", "", "k-timeouthandler", "{}")
			for range effects.Load() {
				<-done
			}
			if tc.outside {
				// The retry came while the first ran: TimeoutHandler's 503
				// again, without a run. Once the first is recorded, the
				// retry is its replay.
				for deadline := time.Now().Add(5 * time.Second); !retry.replayed && time.Now().Before(deadline); {
					time.Sleep(20 * time.Millisecond)
					retry = reviewPost(t, srv.URL+"/charges/c1", "", "k-timeouthandler", "{}")
				}
				if retry.status != http.StatusCreated || !retry.replayed {
					t.Fatalf("retry answered %d %q (replayed %v); want the first run's 201, replayed", retry.status, retry.body, retry.replayed)
				}
			}
			if n := effects.Load(); n != tc.runs {
				t.Fatalf("the handler ran %d times for one key (retry answered %d %q); want %d", n, retry.status, retry.body, tc.runs)
			}
		})
	}
}

// Promise: "wherever it sits it names the operation after the route as the
// client sees it"; "the keys of two routes never meet". Attack: a nested
// ServeMux without StripPrefix (an outer mux mounting an API mux at
// /api/): the middleware around the outer mux sees only the outer pattern
// "/api/", so every inner route shares one operation.
func TestReviewHTTPNestedMuxRoutesMeet(t *testing.T) {
	rt := reviewRuntime(t)
	var charges, refunds atomic.Int32
	api := http.NewServeMux()
	api.HandleFunc("POST /api/charges/{id}", func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charge "+r.PathValue("id"))
	})
	api.HandleFunc("POST /api/refunds/{id}", func(w http.ResponseWriter, r *http.Request) {
		refunds.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "refund "+r.PathValue("id"))
	})
	outer := http.NewServeMux()
	outer.Handle("/api/", api)
	srv := httptest.NewServer(idemhttp.Middleware(rt)(outer))
	defer srv.Close()

	a := reviewPost(t, srv.URL+"/api/charges/o1", "", "k-nested", "{}")
	b := reviewPost(t, srv.URL+"/api/refunds/o1", "", "k-nested", "{}")
	if a.status != 201 || b.status != 201 || charges.Load() != 1 || refunds.Load() != 1 {
		t.Fatalf("same key on two routes of a nested mux: charge %d %q, refund %d %q (charges %d, refunds %d); want both 201, each run once",
			a.status, a.body, b.status, b.body, charges.Load(), refunds.Load())
	}
}

// Promise: "Two scopes never meet: one client never gets another's
// response"; the operation is the route as the client sees it. Attack: an
// inner mux that routes by host (virtual hosting, one tenant per host)
// behind an outer catch-all mux: the operation is the outer "POST /" for
// both hosts, and the fingerprint (method, path, query, body) has no host,
// so host b's request is answered with host a's stored response and its
// handler never runs.
func TestReviewHTTPHostRoutesMeet(t *testing.T) {
	rt := reviewRuntime(t)
	var ranA, ranB atomic.Int32
	hosts := http.NewServeMux()
	hosts.HandleFunc("POST a.example/pay", func(w http.ResponseWriter, r *http.Request) {
		ranA.Add(1)
		io.WriteString(w, "tenant a's receipt")
	})
	hosts.HandleFunc("POST b.example/pay", func(w http.ResponseWriter, r *http.Request) {
		ranB.Add(1)
		io.WriteString(w, "tenant b's receipt")
	})
	outer := http.NewServeMux()
	outer.Handle("/", hosts)
	srv := httptest.NewServer(idemhttp.Middleware(rt)(outer))
	defer srv.Close()

	a := reviewPost(t, srv.URL+"/pay", "a.example", "k-host", `{"cents":100}`)
	b := reviewPost(t, srv.URL+"/pay", "b.example", "k-host", `{"cents":100}`)
	if ranA.Load() != 1 || ranB.Load() != 1 || b.body != "tenant b's receipt" {
		t.Fatalf("host a: %d %q; host b: %d %q replayed=%v (a ran %d, b ran %d): host b got host a's response",
			a.status, a.body, b.status, b.body, b.replayed, ranA.Load(), ranB.Load())
	}
}

// Promise: "A scope over 255 bytes (a long SPIFFE ID) is replaced by its
// first 64 bytes and its SHA-256 in the identity"; "Two scopes never meet:
// one client never gets another's response". Attack: the digest form is
// itself a valid short scope, kept as it is, so a principal whose name is
// the digest form of another principal's long scope (computable from that
// public name) shares its identities and is replayed its responses.
func TestReviewHTTPLongScopeDigestCollides(t *testing.T) {
	rt := reviewRuntime(t)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		io.WriteString(w, "receipt of "+r.Header.Get("X-Principal"))
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt,
		idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Principal") }))(h))
	defer srv.Close()

	long := "spiffe://example.org/" + strings.Repeat("ns/payments/sa/", 20)
	sum := sha256.Sum256([]byte(long))
	forged := long[:64] + "…#sha256:" + hex.EncodeToString(sum[:])

	post := func(principal string) reviewAnswer {
		return reviewPost(t, srv.URL+"/charges", "", "k-scope", "{}", "X-Principal", principal)
	}
	victim := post(long)
	attacker := post(forged)
	if runs.Load() != 2 || attacker.replayed {
		t.Fatalf("victim %d %.40q; principal %q got %d %.60q replayed=%v (handler ran %d times): two scopes met",
			victim.status, victim.body, forged, attacker.status, attacker.body, attacker.replayed, runs.Load())
	}
}

// Promise: "Sub-muxes mounted with http.StripPrefix keep their identities
// apart". Attack: the sub-muxes route with a catch-all pattern
// ("POST /{rest...}"), which also matches the unstripped path, so the
// middleware takes it for an outer mux's pattern and puts no prefix back:
// a payment's key meets a refund's.
func TestReviewHTTPStripPrefixCatchAll(t *testing.T) {
	rt := reviewRuntime(t)
	var runs atomic.Int32
	sub := func(name string) http.Handler {
		m := http.NewServeMux()
		m.Handle("POST /{rest...}", idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, name+" "+r.PathValue("rest"))
		})))
		return m
	}
	outer := http.NewServeMux()
	outer.Handle("/payments/", http.StripPrefix("/payments", sub("payment")))
	outer.Handle("/refunds/", http.StripPrefix("/refunds", sub("refund")))
	srv := httptest.NewServer(outer)
	defer srv.Close()

	a := reviewPost(t, srv.URL+"/payments/o1", "", "k-catchall", "{}")
	b := reviewPost(t, srv.URL+"/refunds/o1", "", "k-catchall", "{}")
	if a.status != 201 || b.status != 201 || runs.Load() != 2 {
		t.Fatalf("payment %d %q; refund %d %.80q (runs %d): two StripPrefix sub-muxes shared an identity", a.status, a.body, b.status, b.body, runs.Load())
	}
}

// Promise: "a 5xx ... written after the request's context ended is
// UNKNOWN, never run again"; "client disconnects mid-request: the handler
// finishes". Schedule: the handler's downstream applied the effect, the
// client gives up (its timeout closes the connection), the handler's wait
// ends with its context and it answers 502. The retry must not run it.
func TestReviewHTTPClientGoneThen5xx(t *testing.T) {
	rt := reviewRuntime(t)
	var effects atomic.Int32
	finished := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges/{id}", func(w http.ResponseWriter, r *http.Request) {
		defer func() { finished <- struct{}{} }()
		effects.Add(1)
		<-r.Context().Done()
		http.Error(w, "gateway did not answer", http.StatusBadGateway)
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt)(mux))
	defer srv.Close()

	// On a loaded machine the claim alone may use up the client's 150 ms
	// (the handler never runs, the schedule did not happen): it is set up
	// again under a new key, at most 100 times or 20 s.
	client := &http.Client{Timeout: 150 * time.Millisecond}
	var key string
	start := time.Now()
	for try := 0; ; try++ {
		key = fmt.Sprintf("k-gone-%d", try)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges/c1", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("first request answered %d; want the client's timeout", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond) // a handler starting as the client gave up
		if effects.Load() > 0 {
			break
		}
		if try >= 100 || time.Since(start) > 20*time.Second {
			t.Fatalf("no first request reached the handler in %d tries (%v)", try+1, time.Since(start))
		}
		t.Logf("the first request under %s never reached the handler: again", key)
	}
	select {
	case <-finished:
	case <-time.After(3 * time.Second):
		t.Fatal("the handler's context did not end after its client left")
	}
	time.Sleep(50 * time.Millisecond)
	retry := reviewPost(t, srv.URL+"/charges/c1", "", key, "{}")
	if n := effects.Load(); n != 1 || retry.status != http.StatusConflict {
		t.Fatalf("retry answered %d %.80q; handler ran %d times; want 409 outcome-unknown and once", retry.status, retry.body, n)
	}
}

// Promise: the middleware covers "every method but GET, HEAD, OPTIONS,
// TRACE"; safe methods pass through, also with Required(true) (a CORS
// preflight has no key) and with a key field that would be invalid on a
// POST. Attack: safe methods with no key, an empty key and two keys.
func TestReviewHTTPSafeMethodsPassThrough(t *testing.T) {
	rt := reviewRuntime(t)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Allow", "GET, HEAD, OPTIONS, POST")
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Required(true))(h))
	defer srv.Close()
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		for _, keys := range [][]string{nil, {""}, {"a", "b"}} {
			req, _ := http.NewRequest(method, srv.URL+"/charges", nil)
			for _, k := range keys {
				req.Header.Add("Idempotency-Key", k)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s with keys %q: %d; want the handler's 200", method, keys, resp.StatusCode)
			}
		}
	}
}

// The same through idem's own client: idemhttp.Transport retries
// TimeoutHandler's 503 with the same key, as it should. TimeoutHandler
// outside the middleware (the documented placement): the attempts made
// while the first runs get 503 again, the first is recorded, and a later
// attempt is its replay; one logical request, one run. Inside (the
// documented hazard): each attempt's 503 released the key while the
// handler still ran, and the handler runs once per attempt.
func TestReviewHTTPTimeoutHandlerWithTransport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outside bool
	}{
		{"outside the middleware: runs once, replayed", true},
		{"inside the middleware: the documented hazard, runs again", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var effects atomic.Int32
			done := make(chan struct{}, 16)
			srv := timeoutPlacement(t, tc.outside, &effects, done)
			defer srv.Close()

			client := idemhttp.NewClient(&idemhttp.Transport{MaxAttempts: 12, MinBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges/c1", strings.NewReader("{}"))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			res, _ := idemhttp.ResultOf(resp)
			for range effects.Load() {
				<-done
			}
			n := effects.Load()
			switch {
			case tc.outside && (n != 1 || resp.StatusCode != http.StatusCreated || !res.Replayed):
				t.Fatalf("one logical request (key %s, %d attempts, last answer %d, replayed %v) ran the handler %d times; want once, and its 201 replayed",
					res.Key, res.Attempts, resp.StatusCode, res.Replayed, n)
			case !tc.outside && n < 2:
				t.Fatalf("TimeoutHandler inside the middleware: the handler ran %d times in %d attempts (last answer %d); docs/http.md says each 503 releases the key while it runs, so it runs again: update the documentation",
					n, res.Attempts, resp.StatusCode)
			}
		})
	}
}
