package idemhttp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime/idemhttp"
)

// r59Listener resets the first connection it accepts (RST, as a server or
// load balancer that drops a connection does) and tells dropped when it did;
// every later connection is served.
type r59Listener struct {
	net.Listener
	once    sync.Once
	dialed  chan struct{} // the client's connect returned
	dropped chan struct{}
}

func (l *r59Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		first := false
		l.once.Do(func() { first = true })
		if !first {
			return c, nil
		}
		<-l.dialed
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		close(l.dropped)
	}
}

// The Transport's doc: "What is retried, with the same key and body:
// connection errors (a dropped connection, a reset, a refused dial, ...)".
// A fresh HTTP/1 connection the server resets before the request is
// written is a reset: net/http got the connection (GotConn) but could not
// write the request's headers (they are larger than its 4 KiB write
// buffer, as a request with a few cookies or a JWT is). The Transport
// judges that attempt "refused" (as if no attempt could write it) and
// does not retry it: the caller gets an error where the next attempt
// would have succeeded.
func TestR59TransportResetBeforeHeadersWrittenNotRetried(t *testing.T) {
	r59ResetBeforeWrite(t, 8<<10)
}

// The same with an ordinary small request: whether net/http writes the
// headers into its buffer before its read loop sees the reset decides.
func TestR59TransportResetSmallRequestNotRetried(t *testing.T) {
	r59ResetBeforeWrite(t, 10)
}

func r59ResetBeforeWrite(t *testing.T, authLen int) {
	var handled atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	ln := &r59Listener{Listener: srv.Listener, dialed: make(chan struct{}), dropped: make(chan struct{})}
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	var dials atomic.Int32
	d := &net.Dialer{}
	base := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && dials.Add(1) == 1 {
				close(ln.dialed)
				// The server drops this connection before the client
				// writes on it.
				<-ln.dropped
				time.Sleep(50 * time.Millisecond)
			}
			return c, err
		},
	}
	defer base.CloseIdleConnections()
	tr := &idemhttp.Transport{Base: base, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("a", authLen))
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn:      func(string) { t.Logf("GetConn") },
		GotConn:      func(i httptrace.GotConnInfo) { t.Logf("GotConn %+v", i) },
		WroteHeaders: func() { t.Logf("WroteHeaders") },
		WroteRequest: func(i httptrace.WroteRequestInfo) { t.Logf("WroteRequest %v", i.Err) },
	}))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var re *idemhttp.RequestError
		errors.As(err, &re)
		t.Fatalf("a connection reset before the request was written was not retried: %v (RequestError %+v, dials %d, handled %d)", err, re, dials.Load(), handled.Load())
	}
	defer resp.Body.Close()
	res, _ := idemhttp.ResultOf(resp)
	t.Logf("dials %d result %+v", dials.Load(), res)
	// (A later attempt that wrote its 16 MiB of headers to the healthy
	// server can itself run past AttemptTimeout on a loaded machine: it
	// was sent, and is retried with the same key, as any other.)
	if resp.StatusCode != http.StatusCreated || handled.Load() < 1 {
		t.Fatalf("status %d, handled %d", resp.StatusCode, handled.Load())
	}
}

// The same promise over HTTP/2 with Transport.AttemptTimeout: "connection
// errors (..., a timed-out attempt with Transport.AttemptTimeout)" are
// retried. An HTTP/2 attempt that waits for a stream slot on its
// connection (the server allows one stream at a time and the client keeps
// to it, StrictMaxConcurrentRequests) got its connection (GotConn) but
// wrote no headers when its AttemptTimeout ends it: judged "refused", it
// is not retried, though the slot frees a moment later.
func TestR59TransportH2AttemptTimeoutWaitingForStreamNotRetried(t *testing.T) {
	release := make(chan struct{})
	var handled atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
			w.WriteHeader(http.StatusOK)
			return
		}
		handled.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1}
	srv.StartTLS()
	defer srv.Close()

	base := srv.Client().Transport.(*http.Transport).Clone()
	base.ForceAttemptHTTP2 = true
	base.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true}
	base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	defer base.CloseIdleConnections()

	// Occupy the one stream.
	slowDone := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: base}).Get(srv.URL + "/slow")
		if err == nil {
			if resp.ProtoMajor != 2 {
				err = errors.New("not HTTP/2: " + resp.Proto)
			}
			resp.Body.Close()
		}
		slowDone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	go func() {
		time.Sleep(400 * time.Millisecond)
		close(release)
	}()

	tr := &idemhttp.Transport{Base: base, AttemptTimeout: 200 * time.Millisecond,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: 10}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader(`{"amount":1}`))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if e := <-slowDone; e != nil {
		t.Fatalf("slow request: %v", e)
	}
	if err != nil {
		var re *idemhttp.RequestError
		errors.As(err, &re)
		t.Fatalf("an attempt AttemptTimeout ended was not retried: %v (RequestError %+v, handled %d)", err, re, handled.Load())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || handled.Load() != 1 {
		t.Fatalf("status %d, handled %d", resp.StatusCode, handled.Load())
	}
}

// r59NoTraceProtocol is a protocol registered on an *http.Transport
// (Transport.RegisterProtocol) for "https" that sends the request its own
// way, running none of the request's httptrace hooks (an HTTP/3 or
// tunnelling RoundTripper; here another net/http transport under a
// context of its own).
type r59NoTraceProtocol struct{ inner *http.Transport }

func (p r59NoTraceProtocol) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.inner.RoundTrip(req.Clone(context.Background()))
}

// RequestError's doc: "Attempts int // attempts sent (net/http wrote the
// request's headers, or a dial failed); 0 when none was", and the
// Transport's: "an attempt whose request headers were never written ...
// was not sent, is not counted in RequestError.Attempts, and is not
// retried". An *http.Transport Base whose "https" requests go to a
// protocol registered for the scheme runs no httptrace hook, though the
// request is sent: the handler runs, then the connection drops before the
// response. The Transport takes net/http's silence for a refusal
// (attemptTrace.fate: base is an *http.Transport, scheme https), reports
// Attempts 0 (nothing sent) and does not retry: a caller that trusts
// Attempts 0 and tries again under a new key charges twice.
func TestR59TransportRegisteredProtocolSentCountedZero(t *testing.T) {
	var handled atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		panic(http.ErrAbortHandler) // the effect ran; the connection drops
	}))
	defer srv.Close()
	srv.Config.ErrorLog = nil

	inner := srv.Client().Transport.(*http.Transport).Clone()
	defer inner.CloseIdleConnections()
	base := &http.Transport{}
	base.RegisterProtocol("https", r59NoTraceProtocol{inner: inner})

	tr := &idemhttp.Transport{Base: base, MaxAttempts: 1}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader(`{"amount":1}`))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("no error (status %d)", resp.StatusCode)
	}
	var re *idemhttp.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("not a RequestError: %v", err)
	}
	t.Logf("handled %d, Attempts %d: %v", handled.Load(), re.Attempts, err)
	if handled.Load() == 1 && re.Attempts == 0 {
		t.Fatalf("the handler ran, but RequestError.Attempts is 0 (nothing sent): %v", err)
	}
}

// HTTP/1 and AttemptTimeout: the first connection goes to a server that
// accepts and never reads (a stuck backend behind the address), the
// request's headers are larger than the socket buffers take, so net/http
// blocks writing them until AttemptTimeout ends the attempt. The next
// connection reaches a healthy server. "a timed-out attempt with
// Transport.AttemptTimeout" is retried, says the Transport's doc.
func TestR59TransportH1AttemptTimeoutWritingHeadersNotRetried(t *testing.T) {
	var handled atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.MaxHeaderBytes = 64 << 20
	srv.Start()
	defer srv.Close()

	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()

	var dials atomic.Int32
	d := &net.Dialer{}
	base := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				c, err := d.DialContext(ctx, network, stuck.Addr().String())
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetWriteBuffer(4096)
				}
				return c, err
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	defer base.CloseIdleConnections()
	tr := &idemhttp.Transport{Base: base, AttemptTimeout: 500 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader(`{"amount":1}`))
	req.Header.Set("X-Blob", strings.Repeat("a", 16<<20))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil && dials.Load() < 2 {
		t.Fatalf("an attempt AttemptTimeout ended was not retried: %.300v (dials %d, handled %d)", err, dials.Load(), handled.Load())
	}
	if err != nil {
		// Retried, and every later attempt also ran past AttemptTimeout
		// writing its 16 MiB of headers (-race on a loaded machine).
		t.Logf("retried %d times, each past AttemptTimeout: %.200v", dials.Load()-1, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || handled.Load() != 1 {
		t.Fatalf("status %d, handled %d", resp.StatusCode, handled.Load())
	}
}
