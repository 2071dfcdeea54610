package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs: "when it is cancelled, during a wait or an attempt, RoundTrip
// returns its error (and its cause, when it has one: errors.Is matches
// both)" — over HTTP/2 (net/http's own, through an httptest TLS server).
func TestR57H2CancelCauseDuringAttempt(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	tr := &idemhttp.Transport{Base: srv.Client().Transport}
	cause := errors.New("r57: the caller gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-arrived
		cancel(cause)
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"a":1}`))
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got a response %s", resp.Status)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("err = %v; errors.Is(context.Canceled) = %v, errors.Is(cause) = %v (want both)",
			err, errors.Is(err, context.Canceled), errors.Is(err, cause))
	}
}

// A protocol registered on net/http's own Transport (RegisterProtocol)
// is sent by net/http whatever its URL's host: it is not "a request
// net/http refuses to send". Its first attempt meets a connection reset,
// which the docs list as retried; and RequestError.Attempts is "attempts
// sent".
func TestR57RegisteredProtocolResetRetried(t *testing.T) {
	var calls atomic.Int32
	alt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		if calls.Add(1) == 1 {
			return nil, &net.OpError{Op: "read", Net: "unix", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
		}
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	base := &http.Transport{}
	base.RegisterProtocol("unix", alt)
	tr := &idemhttp.Transport{Base: base, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

	// Sanity: net/http sends it (no host in the URL).
	u, _ := url.Parse("unix:///pay")
	req, _ := http.NewRequest(http.MethodPost, u.String(), strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		var re *idemhttp.RequestError
		errors.As(err, &re)
		t.Fatalf("err = %v (Attempts %d), base called %d time(s); want the reset retried and 200", err, re.Attempts, calls.Load())
	}
	defer resp.Body.Close()
	res, _ := idemhttp.ResultOf(resp)
	if resp.StatusCode != 200 || res.Attempts != 2 || calls.Load() != 2 {
		t.Fatalf("status %d, Attempts %d, calls %d", resp.StatusCode, res.Attempts, calls.Load())
	}
}

// A custom Base (an in-process or unix-socket transport) that routes by
// req.Host and sends a request whose URL has no host: an attempt it sent
// and that failed is counted in RequestError.Attempts ("attempts sent").
func TestR57CustomBaseAttemptsCounted(t *testing.T) {
	var calls atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return nil, &net.OpError{Op: "read", Net: "unix", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	})
	tr := &idemhttp.Transport{Base: base, MaxAttempts: 1}
	// Without a scheme, and with http (which net/http's own transport
	// would refuse without a URL host: this base routes by req.Host).
	for _, scheme := range []string{"", "http"} {
		calls.Store(0)
		req := &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: scheme, Path: "/pay"}, Host: "payments", Header: http.Header{}}
		_, err := tr.RoundTrip(req)
		var re *idemhttp.RequestError
		if !errors.As(err, &re) {
			t.Fatalf("scheme %q: err = %v", scheme, err)
		}
		if re.Attempts != int(calls.Load()) {
			t.Fatalf("scheme %q: RequestError.Attempts = %d, but the base sent %d attempt(s): %v", scheme, re.Attempts, calls.Load(), err)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// docs/http.md, "Records resolved by hand": idemhttp replays
// `{"status":201,"headers":...,"body":...}` as "that status, those
// headers ..., and the body"; "A record the adapter cannot read is
// answered record-unreadable / RECORD_UNREADABLE and logged." Each case
// is a record resolved by hand that cannot be replayed as written: the
// duplicate must get it as written or 500 record-unreadable, never
// another status or a broken response.
// A 1xx status as the final answer: net/http sends 103 as an informational
// response, then 200 with the body; 101 switches protocols.
func TestR57HTTPResolved1xxStatus(t *testing.T) {
	r57Resolved(t, []r57Case{
		{"103 as the final status", `{"status":103,"body_text":"charged"}`},
		{"101 as the final status", `{"status":101,"body_text":"charged"}`},
	})
}

// Framing headers (Content-Length, Transfer-Encoding) written into the
// record: the replay is a broken HTTP response (the client reads an
// unexpected EOF, or its transport refuses the response).
func TestR57HTTPResolvedFramingHeaders(t *testing.T) {
	r57Resolved(t, []r57Case{
		{"content-length longer than the body", `{"status":200,"headers":{"Content-Length":"99"},"body_text":"charged"}`},
		{"content-length shorter than the body", `{"status":200,"headers":{"Content-Length":"1"},"body_text":"charged"}`},
		{"transfer-encoding", `{"status":200,"headers":{"Transfer-Encoding":"gzip"},"body_text":"charged"}`},
	})
}

// Not JSON (runtime.Resolve takes it; idemctl refuses invalid JSON): the
// duplicate is told "its response was too large to store" (410).
func TestR57HTTPResolvedNotJSON(t *testing.T) {
	r57Resolved(t, []r57Case{
		{"trailing garbage", `{"status":201,"body_text":"charged"} x`},
		{"two values", `{"status":201,"body_text":"charged"}{"status":200}`},
	})
}

type r57Case struct{ name, response string }

func r57Resolved(t *testing.T, cases []r57Case) {
	for i, c := range cases {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		mux := http.NewServeMux()
		mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusGatewayTimeout)
		})
		srv := httptest.NewServer(idemhttp.Middleware(rt)(mux))
		key := fmt.Sprintf("k%d", i)
		send := func() (int, string, error) {
			req, _ := http.NewRequest("POST", srv.URL+"/pay", strings.NewReader(`{"cents":1}`))
			req.Header.Set("Idempotency-Key", key)
			resp, err := srv.Client().Do(req)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b), err
		}
		if code, _, err := send(); code != http.StatusGatewayTimeout {
			t.Fatalf("%s: first: %d %v", c.name, code, err)
		}
		id := runtime.Identity{Operation: "POST /pay", Key: key}
		if rec, err := rt.Store().Get(context.Background(), id); err != nil || rec.State != runtime.StateUnknown {
			t.Fatalf("%s: record: %v %v", c.name, rec.State, err)
		}
		if _, err := runtime.Resolve(context.Background(), rt.Store(), runtime.Resolution{ID: id, To: runtime.ResolveSuccess,
			Response: []byte(c.response), Reason: "found in the gateway", Owner: "idemctl:alice"}); err != nil {
			t.Fatalf("%s: resolve: %v", c.name, err)
		}
		code, body, err := send()
		if runs != 1 {
			t.Errorf("%s: handler ran %d times", c.name, runs)
		}
		// The framing headers are dropped (docs/http.md): the body as
		// written, framed by net/http.
		unreadable := code == http.StatusInternalServerError && strings.Contains(body, "record-unreadable")
		asWritten := code == http.StatusOK && body == "charged" && err == nil
		if !unreadable && !asWritten {
			t.Errorf("%s: duplicate got %d %q (err %v); want 500 record-unreadable (or the record as written)", c.name, code, body, err)
		}
		srv.Close()
	}
}
