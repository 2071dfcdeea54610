package idemhttp_test

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime/idemhttp"
)

// docs/http.md, the client transport, "never retried": "a request net/http
// refuses to send (no host in its URL, no Header, a method that is not a
// token, a header or trailer name or value it cannot send;
// `RequestError.Attempts` 0); a body shorter or longer than its
// ContentLength". go doc idemhttp.Transport: "Never retried: ... errors that
// another attempt cannot fix (... for http and https, a request net/http
// refuses to send: ... a header or trailer field it cannot send ...; a body
// shorter or longer than the request's ContentLength ...)".
//
// Each request below is refused by net/http before a byte reaches the
// server, the same on every attempt.
func TestR58TransportRefusedRequestRetried(t *testing.T) {
	cases := []struct {
		name string
		make func(url string) *http.Request
	}{
		{"trailer-content-length", func(url string) *http.Request {
			// a trailer name net/http refuses ("invalid Trailer key")
			req, _ := http.NewRequest("POST", url, strings.NewReader("hello"))
			req.ContentLength = -1 // chunked, so a trailer can follow
			req.Trailer = http.Header{"Content-Length": nil}
			return req
		}},
		{"trailer-transfer-encoding", func(url string) *http.Request {
			req, _ := http.NewRequest("POST", url, strings.NewReader("hello"))
			req.ContentLength = -1
			req.Trailer = http.Header{"Transfer-Encoding": nil}
			return req
		}},
		{"url-control-character", func(url string) *http.Request {
			// net/http: "can't write control character in Request.URL"
			req, _ := http.NewRequest("POST", url, strings.NewReader("hello"))
			req.URL.RawQuery = "note=a\x01b"
			return req
		}},
		{"nil-body-content-length", func(url string) *http.Request {
			// a body (none) shorter than its ContentLength
			req, _ := http.NewRequest("POST", url, nil)
			req.ContentLength = 5
			return req
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.WriteHeader(201)
			}))
			defer srv.Close()
			tr := &idemhttp.Transport{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
			// Through an http.Client, as docs/http.md's example sends.
			resp, err := idemhttp.NewClient(tr).Do(c.make(srv.URL))
			if resp != nil {
				resp.Body.Close()
			}
			var re *idemhttp.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("err %v (resp %v), want a *RequestError", err, resp)
			}
			t.Logf("err: %v; attempts %d; server saw %d", err, re.Attempts, hits.Load())
			if hits.Load() != 0 {
				t.Fatalf("net/http sent it: the case is wrong")
			}
			if re.Attempts != 0 {
				t.Errorf("RequestError.Attempts = %d for a request net/http refused %d times before sending anything; docs: 0, never retried", re.Attempts, re.Attempts)
			}
		})
	}
}

// docs/http.md: "`idemhttp.Transport` is the other end: an
// `http.RoundTripper` that gives each logical request one key and sends it
// on every attempt, and retries only what is safe to retry." go doc: "A
// request with an unsafe method ... gets its key from ... the request
// context (WithKey), or a new random UUIDv4".
//
// A request without Header given to RoundTrip, under a Base that sends it
// (an auth transport that clones the request into a header of its own, as
// golang.org/x/oauth2's does): the Transport sends the POST without its
// key, and retries it after a 503: the server runs it twice, keyless. The
// "no Header" rule is net/http's own transport's, judged whatever Base is.
func TestR58TransportNilHeaderCustomBaseSendsNoKey(t *testing.T) {
	var hits, keyless atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		if r.Header.Get("Idempotency-Key") == "" {
			keyless.Add(1)
		}
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	auth := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r2 := r.Clone(r.Context())
		h := make(http.Header, len(r.Header)+1)
		for k, v := range r.Header {
			h[k] = v
		}
		h.Set("Authorization", "Bearer t")
		r2.Header = h
		return http.DefaultTransport.RoundTrip(r2)
	})
	tr := &idemhttp.Transport{Base: auth, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"cents":100}`))
	req.Header = nil
	resp, err := tr.RoundTrip(req.WithContext(idemhttp.WithKey(req.Context(), "order-42")))
	if resp != nil {
		resp.Body.Close()
	}
	t.Logf("resp %v, err %v; server: %d attempts, %d without a key", resp != nil && resp.StatusCode == 201, err, hits.Load(), keyless.Load())
	if keyless.Load() > 0 {
		t.Fatalf("%d of %d attempts of a POST given key order-42 (WithKey) reached the server without an Idempotency-Key; the Transport retried it after a 503", keyless.Load(), hits.Load())
	}
}

// docs/http.md, "Records resolved by hand": idemhttp reads the response
// "in a documented form (as well as in the form it stores itself)" and
// replays "those headers (... `Content-Length` and `Transfer-Encoding` are
// dropped, net/http frames the body)". Written in the form the middleware
// stores (`"header"` of lists, a base64 `"body"`), the framing headers are
// kept, and the replay is a broken response.
func TestR58HTTPResolvedStoredFormFramingHeaders(t *testing.T) {
	r57Resolved(t, []r57Case{
		{"stored form, content-length longer than the body", `{"status":200,"header":{"Content-Length":["99"]},"body":"Y2hhcmdlZA=="}`},
		{"stored form, content-length shorter than the body", `{"status":200,"header":{"Content-Length":["1"]},"body":"Y2hhcmdlZA=="}`},
		{"stored form, transfer-encoding", `{"status":200,"header":{"Transfer-Encoding":["gzip"]},"body":"Y2hhcmdlZA=="}`},
	})
}

// CHANGELOG Unreleased: "`RequestError.Attempts` counts the attempts sent:
// a request net/http refuses to send is 0". docs/http.md: "a request
// net/http refuses to send (... a method that is not a token ...;
// `RequestError.Attempts` 0)"; retried: "connection errors (refused,
// reset, dropped before the reply)".
//
// Over HTTP/2 net/http does not refuse a method that is not a token: its
// HTTP/2 transport (registered for https, asked before the method check)
// sends it on a cached connection. The handler runs; its stream is reset.
// The Transport says no attempt was sent (0) and does not retry: a client
// that reads Attempts 0 as "nothing happened" and tries again under a new
// key charges twice.
func TestR58TransportH2InvalidMethodSentCountedZero(t *testing.T) {
	var runs atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return // warms the connection
		}
		runs.Add(1)
		panic(http.ErrAbortHandler) // the reply is lost: the stream is reset
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	base := srv.Client().Transport
	warm, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	if warm.ProtoMajor != 2 {
		t.Skipf("not HTTP/2: %s", warm.Proto)
	}
	tr := &idemhttp.Transport{Base: base, MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	req, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"cents":100}`))
	req.Method = "CHARGE(1)" // not a token: '(' and ')'
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	var re *idemhttp.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("resp %v, err %v; want a *RequestError", resp, err)
	}
	t.Logf("err %v; Attempts %d; the handler ran %d time(s)", err, re.Attempts, runs.Load())
	if runs.Load() > 0 && re.Attempts == 0 {
		t.Fatalf("RequestError.Attempts = 0 (\"net/http refuses to send\"), but the request was sent and its handler ran %d time(s)", runs.Load())
	}
}
