package idemhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idemkit/idem/runtime"
)

// Client defaults; a zero field of [Transport] means its default.
const (
	DefaultMaxAttempts     = 5
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
	DefaultMaxRetryAfter   = 30 * time.Second
	DefaultMaxBufferedBody = 1 << 20
)

// ErrBodyNotReplayable is returned, before anything is sent, for a request
// whose body cannot be sent again: it has no GetBody and is larger than
// [Transport.MaxBufferedBody]. Set Request.GetBody (http.NewRequest does
// for *bytes.Buffer, *bytes.Reader and *strings.Reader bodies) or raise
// the limit.
var ErrBodyNotReplayable = errors.New("idemhttp: request body cannot be replayed")

// Transport is an [http.RoundTripper] for the client side of the
// Idempotency-Key draft: it gives each logical request one key and sends it
// on every attempt, and retries what is safe to retry.
//
// A request with an unsafe method (not GET, HEAD, OPTIONS, TRACE) gets its
// key from, in this order: the request's own Idempotency-Key header, the
// request context ([WithKey]), or a new random UUIDv4 ([NewKey]), minted
// once per call of RoundTrip. Requests with a safe method get no key and
// are retried the same way.
//
// What is retried, with the same key and body: connection errors (a
// dropped connection, a reset, a refused dial, a timed-out attempt with
// [Transport.AttemptTimeout]) and responses with status 408, 409, 425,
// 429, 502, 503 and 504 (see [Transport.RetryStatus]) that are not
// replays. A server following the draft answers a duplicate of a request
// still in flight with 409: the retry, once the first is done, gets its
// response replayed. Never retried: any other status (400 and 422 are the
// client's bug, other 4xx and 5xx definitive), a response marked
// "Idempotent-Replayed: true" (a recorded outcome does not change), and
// errors that another attempt cannot fix (a certificate or a host that
// does not exist; a request net/http refuses to send or cannot write; a
// body shorter or longer than the request's ContentLength; a body that
// cannot be replayed).
//
// Which attempts were sent is told by net/http itself: each attempt runs
// with an [httptrace.ClientTrace], and one whose request headers were
// never written was not sent and is not counted in
// [RequestError.Attempts]: one net/http got a connection for and could
// not write (a control character in the URL, a trailer named
// Content-Length, a ContentLength with no Body) is not retried either; one
// cut off before its headers went out (a reset, a timeout) is retried.
// Over HTTP/2, which sends a method HTTP/1 refuses, the attempt counts as
// any other. An attempt that ran none of the trace's hooks (net/http
// refused it before asking for a connection; a Base of its own that does
// not use net/http or drops the request's context; a protocol registered
// for the scheme) is judged by net/http's own rules: for http and https,
// no Header, no host at all (with Base nil or an *http.Transport, a URL
// without a host whatever req.Host says), a method that is not a token, a
// header or trailer field it cannot send. A request given a key but no
// Header gets one for the key (a Base that copies the headers sends it).
//
// Waits between attempts grow exponentially from MinBackoff, capped at
// MaxBackoff, with jitter (a random half of each); a Retry-After header
// (delay-seconds or an HTTP-date) is honoured: the wait is at least that
// long. A Retry-After over MaxRetryAfter ends the retries with that
// response. The request context bounds everything: when the next attempt
// would start after its deadline, RoundTrip returns the last response (or
// error) at once instead of sleeping; when it is cancelled, during a wait
// or an attempt, RoundTrip returns its error (and its cause, when it has
// one: errors.Is matches both). An
// [http.Client]'s Timeout is such a deadline, on the whole logical request.
//
// The body is sent again on each attempt: through Request.GetBody when set,
// otherwise buffered once, up to MaxBufferedBody bytes (beyond it,
// [ErrBodyNotReplayable] before anything is sent).
//
// [ResultOf] tells, from the response, the key, the number of attempts and
// whether the answer was a replay; errors are [*RequestError] with the
// same. A Transport is safe for concurrent use; its fields must not change
// once it is in use. The zero value is usable.
//
// Compose it with other transports through Base. The key is minted in
// RoundTrip, so anything that retries *around* the Transport (a
// retryablehttp.Client, an application loop calling Do again) sends a new
// key per attempt unless the key is fixed before it: turn those retries off
// (retryablehttp: RetryMax = 0) or set the key once with [WithKey] or the
// header. Transports under it (Base: otelhttp.NewTransport, a logging
// transport) see every attempt with its key. net/http's own transport
// resends a request carrying an Idempotency-Key on a reused connection that
// failed before any byte of a response: same request, same key. See
// docs/http.md.
type Transport struct {
	// Base sends each attempt (default http.DefaultTransport).
	Base http.RoundTripper
	// Header is the key's header (default [DefaultHeader]).
	Header string
	// NewKey mints the key of a request without one (default [NewKey]).
	NewKey func() string
	// MaxAttempts bounds the attempts of one logical request, the first
	// included (default [DefaultMaxAttempts]; 1: no retries).
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the computed wait between attempts
	// (defaults [DefaultMinBackoff], [DefaultMaxBackoff]).
	MinBackoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After waited for (default
	// [DefaultMaxRetryAfter]); a longer one returns its response.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds each attempt, until its response's headers
	// are read and, for the response returned, until its body is closed
	// (default: none; the request context bounds them all). An attempt
	// that times out is retried.
	AttemptTimeout time.Duration
	// MaxBufferedBody bounds the body buffered to be sent again, for
	// requests without GetBody (default [DefaultMaxBufferedBody]).
	MaxBufferedBody int64
	// RetryStatus reports whether a response status, not replayed, is
	// retried (default: 408, 409, 425, 429, 502, 503, 504).
	RetryStatus func(status int) bool
	// QuotedKey sends a key the Transport sets (from [WithKey] or minted)
	// as the draft's field value, a Structured Field String: in double
	// quotes, with " and \ escaped. By default it is sent bare, as most
	// servers read the field (a plain token, stored and looked up as
	// written: a payment provider's "find the charge by its key"), and as
	// idem's middleware reads either form; set QuotedKey for a server that
	// parses the field strictly as the draft says (it ignores a bare key).
	// A key holding a comma, a double quote or a backslash, which a bare
	// field cannot carry as one key, is sent quoted either way. A key in
	// the request's own header is sent as written.
	QuotedKey bool
}

// sfString is key as a Structured Field String (RFC 8941 section 3.3.3):
// in double quotes, with '"' and '\' escaped. Keys are visible ASCII
// (runtime.ValidateKey), which a String holds.
func sfString(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// NewClient returns an http.Client whose transport is t (a zero Transport
// when t is nil).
func NewClient(t *Transport) *http.Client {
	if t == nil {
		t = &Transport{}
	}
	return &http.Client{Transport: t}
}

type clientKeyCtx struct{}

// WithKey returns a context whose requests through a [Transport] carry key
// (unless they have the header already). The key is 1 to 255 bytes of
// visible ASCII ([runtime.ValidateKey]), as the middleware wants it: the
// Transport refuses another before sending (a [*RequestError] wrapping
// [runtime.ErrInvalidKey]), as it does a key of [Transport.NewKey]'s. Set it once per logical operation,
// before any retry loop of your own, and persist it with the intent: every
// attempt, in this process or after a restart, then sends the same key.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKeyCtx{}, key)
}

// KeyFrom returns the key set by [WithKey].
func KeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(clientKeyCtx{}).(string)
	return k, ok
}

// NewKey returns a random version 4 UUID, from crypto/rand.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Result is what a [Transport] did for one logical request.
type Result struct {
	// Key is the idempotency key sent ("" for a safe method).
	Key string
	// Attempts is the number of attempts sent, 1 when not retried.
	Attempts int
	// Replayed: the response carries "Idempotent-Replayed: true", the
	// server's record of an earlier attempt (or an earlier request with
	// the same key).
	Replayed bool
}

type resultCtx struct{}

// ResultOf returns the Result of a response a [Transport] returned
// (directly or through an http.Client); false for other responses. The
// Transport sets the response's Request to the last attempt's request,
// whose context carries the Result.
func ResultOf(resp *http.Response) (Result, bool) {
	if resp == nil || resp.Request == nil {
		return Result{}, false
	}
	r, ok := resp.Request.Context().Value(resultCtx{}).(Result)
	return r, ok
}

// RequestError is the error of a logical request that got no response.
type RequestError struct {
	Key      string // the key sent ("" for a safe method)
	Attempts int    // attempts sent (net/http wrote the request's headers, or a dial failed); 0 when none was
	Err      error  // the last attempt's error, or the context's
}

func (e *RequestError) Error() string {
	if e.Attempts == 0 {
		if msg := e.Err.Error(); strings.HasPrefix(msg, "idemhttp: ") {
			return msg // ErrBodyNotReplayable and the like say it already
		}
		return "idemhttp: " + e.Err.Error()
	}
	return fmt.Sprintf("idemhttp: %d attempt(s) with the same key: %v", e.Attempts, e.Err)
}

func (e *RequestError) Unwrap() error { return e.Err }

// RoundTrip sends req, retrying it with the same key; see [Transport].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	header := t.Header
	if header == "" {
		header = DefaultHeader
	}
	key, field := "", "" // the key, and the field value sent for it ("": the request's own)
	if !safeMethod(req.Method) {
		if vs := headerValues(req.Header, header); len(vs) > 0 {
			key = vs[0]
		} else {
			if k, ok := KeyFrom(ctx); ok && k != "" {
				key = k
			} else if t.NewKey != nil {
				key = t.NewKey()
			} else {
				key = NewKey()
			}
			if err := runtime.ValidateKey(key); err != nil {
				// A key the middleware refuses, or reads as another: net/http
				// sends " k1" as it is, and the server's reader trims it to
				// k1 (review r56).
				if req.Body != nil {
					_ = req.Body.Close() // a RoundTripper closes the body, errors included
				}
				return nil, &RequestError{Key: key, Err: fmt.Errorf("idemhttp: the key to send: %w", err)}
			}
			field = key
			if t.QuotedKey || strings.ContainsAny(key, `,"\`) {
				field = sfString(key)
			}
		}
	}
	body, err := t.replayable(req)
	if err != nil {
		return nil, &RequestError{Key: key, Err: err}
	}
	maxAttempts := orDefault(t.MaxAttempts, DefaultMaxAttempts)
	malformed := t.refusedByNetHTTP(req, header, field)
	sent := 0
	for attempt := 1; ; attempt++ {
		resp, cancel, fate, err := t.send(ctx, req, header, field, body, attempt)
		res := Result{Key: key, Attempts: attempt}
		retry, after := t.retryable(ctx, resp, err)
		if err != nil && fate == attemptUnknown && malformed {
			// A base of its own that said nothing of the attempt
			// (no httptrace hook ran), and a request net/http's own
			// transport would refuse: judged refused, as before.
			fate = attemptRefused
		}
		if err != nil && fate != attemptSent && fate != attemptUnknown && fate != attemptCutOff {
			// net/http refused it or could not write it (it never wrote
			// the request's headers), or its body is not as long as its
			// ContentLength: so will every attempt (reviews r55, r56,
			// r58). One whose body could not be had again was not sent
			// either.
			retry = false
		}
		if err == nil || fate == attemptSent || fate == attemptUnknown || fate == attemptBadLength {
			sent++
		}
		wait := t.backoff(attempt)
		if after > wait {
			wait = after
		}
		stop := !retry || attempt >= maxAttempts || after > orDefault(t.MaxRetryAfter, DefaultMaxRetryAfter)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= wait {
			stop = true // the next attempt would start after the deadline: answer now
		}
		if stop {
			if err != nil {
				cancel()
				if ctxErr := ctx.Err(); ctxErr != nil {
					// Cancelled while the attempt ran: net/http's HTTP/1
					// returns the cause alone, its HTTP/2 the context's
					// error alone (reviews r56, r57). Both, as for a
					// cancellation during a wait.
					if !errors.Is(err, ctxErr) {
						err = fmt.Errorf("%w: %w", ctxErr, err)
					}
					if cause := context.Cause(ctx); !errors.Is(err, cause) {
						err = fmt.Errorf("%w: %w", err, cause)
					}
				}
				return nil, &RequestError{Key: key, Attempts: sent, Err: err}
			}
			res.Replayed = strings.EqualFold(resp.Header.Get(ReplayedHeader), "true")
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
			resp.Request = resp.Request.WithContext(context.WithValue(resp.Request.Context(), resultCtx{}, res))
			return resp, nil
		}
		last := err
		if resp != nil {
			last = fmt.Errorf("status %s", resp.Status)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
			_ = resp.Body.Close()
		}
		cancel()
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			err := ctx.Err()
			if cause := context.Cause(ctx); cause != err {
				// Both: errors.Is(err, context.Canceled) holds, and the
				// cause is kept (review r55).
				err = fmt.Errorf("%w: %w", err, cause)
			}
			return nil, &RequestError{Key: key, Attempts: sent, Err: fmt.Errorf("%w while waiting to retry after %v", err, last)}
		case <-timer.C:
		}
	}
}

// CloseIdleConnections closes the idle connections of Base (what
// http.Client.CloseIdleConnections calls).
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// headerValues returns the values of the header field name in h, under
// any spelling of the name: net/http sends a key of the map as it is
// written, so a key set by assigning the map under a lower-case name
// (req.Header["idempotency-key"], as code forwarding HTTP/2 headers does)
// is the request's own field on the wire. Read by its canonical name only,
// it was missed and the Transport added a key of its own beside it: two
// fields, a new key per RoundTrip (review r54).
func headerValues(h http.Header, name string) []string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs
		}
	}
	return nil
}

// attemptFate is what became of an attempt that failed: sent (its
// headers were written, or a dial failed: for all the Transport knows it
// may have reached the server), refused by net/http (a connection was got
// but the request could not be written: so on any attempt), cut off
// before its headers were written (a reset, a timeout: not sent, and
// retried), unknown (no httptrace hook ran: net/http's own rules judge
// it), not sent (its body could not be had again), or sent with a body
// whose length is not the request's ContentLength, which every attempt
// would send alike.
type attemptFate int

const (
	attemptSent attemptFate = iota
	attemptRefused
	attemptCutOff // not sent, and retried
	attemptUnknown
	attemptUnsent
	attemptBadLength
)

// attemptTrace notes the httptrace hooks an attempt ran: net/http's
// transports (HTTP/1 and HTTP/2), and a base that wraps one, run them on
// the attempt's context.
type attemptTrace struct {
	asked, got, wrote atomic.Bool
}

func (a *attemptTrace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn:      func(string) { a.asked.Store(true) },
		GotConn:      func(httptrace.GotConnInfo) { a.got.Store(true) },
		WroteHeaders: func() { a.wrote.Store(true) },
	}
}

// fate judges an attempt that failed with err by the hooks it ran: see
// [attemptFate]. An attempt that got a connection but never wrote its
// headers was refused when net/http could not write the request (an error
// of its own: a trailer it cannot send, a control character in the URL, a
// ContentLength with no Body); one cut off meanwhile (a reset, a timeout,
// an end of file: a network error) was not sent, and is retried. One that
// ran no hook is left to net/http's own rules ([attemptUnknown]): a
// protocol registered for the scheme (Transport.RegisterProtocol) may have
// sent it without running any (review r59).
func (a *attemptTrace) fate(err error) attemptFate {
	switch {
	case a.wrote.Load():
		return attemptSent
	case a.got.Load():
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return attemptCutOff
		}
		return attemptRefused
	case a.asked.Load():
		return attemptSent // a dial that failed: retried, and counted as ever
	}
	return attemptUnknown
}

// send sends one attempt. cancel releases the attempt's timeout; the
// caller calls it when done with the response.
func (t *Transport) send(ctx context.Context, req *http.Request, header, field string, body func() (io.ReadCloser, error), attempt int) (*http.Response, context.CancelFunc, attemptFate, error) {
	cancel := context.CancelFunc(func() {})
	if t.AttemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, t.AttemptTimeout)
	}
	trace := new(attemptTrace)
	r := req.Clone(httptrace.WithClientTrace(ctx, trace.hooks()))
	if field != "" && len(headerValues(r.Header, header)) == 0 {
		if r.Header == nil {
			// The key goes on every attempt: a base of its own sends
			// a request without Header (one that copies the header
			// into a new map, as auth transports do), and sent it
			// without its key (review r58).
			r.Header = make(http.Header, 1)
		}
		r.Header.Set(header, field)
	}
	if body != nil {
		r.GetBody = body
		if attempt > 1 || req.GetBody == nil {
			b, err := body()
			if err != nil {
				cancel()
				return nil, cancel, attemptUnsent, fmt.Errorf("%w: GetBody: %w", ErrBodyNotReplayable, err)
			}
			r.Body = b
		}
	}
	var counted *lengthBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength > 0 {
		counted = &lengthBody{ReadCloser: r.Body, want: r.ContentLength}
		r.Body = counted
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		cancel()
		if counted != nil && counted.mismatch() {
			return nil, cancel, attemptBadLength, err
		}
		return nil, cancel, trace.fate(err), err
	}
	if resp.Request == nil {
		resp.Request = r
	}
	return resp, cancel, attemptSent, nil
}

// lengthBody counts what the base transport reads of an attempt's body:
// net/http fails a request whose body is shorter or longer than its
// ContentLength, and another attempt with the same body fails alike.
// (Atomics: the transport may still be reading it on its own goroutine.)
type lengthBody struct {
	io.ReadCloser
	want int64
	n    atomic.Int64
	eof  atomic.Bool
}

func (b *lengthBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// mismatch reports whether the body read so far is not ContentLength long.
func (b *lengthBody) mismatch() bool {
	n := b.n.Load()
	return n > b.want || b.eof.Load() && n != b.want
}

// replayable returns how to get the request's body again (nil: no body),
// buffering it when the request has no GetBody. It closes req.Body when
// it buffers it or fails.
func (t *Transport) replayable(req *http.Request) (func() (io.ReadCloser, error), error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		return req.GetBody, nil
	}
	limit := t.MaxBufferedBody
	if limit <= 0 {
		limit = DefaultMaxBufferedBody
	}
	if req.ContentLength > limit {
		_ = req.Body.Close()
		return nil, fmt.Errorf("%w: the body is %d bytes, over the %d-byte buffer, and the request has no GetBody", ErrBodyNotReplayable, req.ContentLength, limit)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("idemhttp: reading the request body: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: the body is over the %d-byte buffer and the request has no GetBody", ErrBodyNotReplayable, limit)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, nil
}

// retryable decides whether an attempt's outcome is retried, and the
// Retry-After it asked for.
func (t *Transport) retryable(ctx context.Context, resp *http.Response, err error) (bool, time.Duration) {
	if ctx.Err() != nil {
		return false, 0 // the caller gave up
	}
	if err != nil {
		return retryableError(err), 0
	}
	if strings.EqualFold(resp.Header.Get(ReplayedHeader), "true") {
		return false, 0 // a recorded outcome: another attempt replays it again
	}
	retry := t.RetryStatus
	if retry == nil {
		retry = defaultRetryStatus
	}
	if !retry(resp.StatusCode) {
		return false, 0
	}
	return true, retryAfter(resp.Header.Get("Retry-After"), time.Now())
}

func defaultRetryStatus(s int) bool {
	switch s {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// refusedByNetHTTP reports whether net/http's own transport would refuse
// req before sending it, whatever the attempt: no URL, no Header, no host
// at all, a method that is not a token, or a header or trailer field name
// or value it cannot send (the key's field, value included). It judges
// only attempts that ran no httptrace hook (see [attemptTrace.fate]: the
// others are judged by what net/http did). A URL without a host but with
// req.Host set counts only when Base is net/http's own (nil or an
// *http.Transport): another base may route by req.Host. A scheme other
// than http and https is never judged: net/http hands it to the protocol
// registered for it (Transport.RegisterProtocol) without these checks
// (review r57).
func (t *Transport) refusedByNetHTTP(req *http.Request, header, field string) bool {
	if req.URL == nil || req.Header == nil && field == "" {
		return true // (a request given a key gets a Header: see send)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return false
	}
	if req.URL.Host == "" {
		switch t.Base.(type) {
		case nil, *http.Transport:
			return true
		}
		if req.Host == "" {
			return true
		}
	}
	if strings.IndexFunc(req.Method, func(r rune) bool { return !httpguts.IsTokenRune(r) }) >= 0 {
		return true // "" is GET
	}
	if field != "" && (!httpguts.ValidHeaderFieldName(header) || !httpguts.ValidHeaderFieldValue(field)) {
		return true
	}
	return badFields(req.Header) || badFields(req.Trailer)
}

// badFields reports whether h has a field name or value net/http cannot
// send.
func badFields(h http.Header) bool {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return true
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return true
			}
		}
	}
	return false
}

// retryableError: an error another attempt may not get. Errors are
// retried unless they say that no attempt can succeed.
func retryableError(err error) bool {
	var (
		cert    *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		dns     *net.DNSError
	)
	switch {
	case errors.Is(err, ErrBodyNotReplayable), errors.As(err, &cert), errors.As(err, &unknown),
		errors.As(err, &host), errors.As(err, &invalid):
		return false
	case errors.As(err, &dns) && dns.IsNotFound:
		return false
	case strings.Contains(err.Error(), "unsupported protocol scheme"):
		return false
	}
	return true
}

// retryAfter parses a Retry-After field: delay-seconds or an HTTP-date
// (RFC 9110 section 10.2.3); 0 when absent, malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	// The longest wait a time.Duration holds (about 292 years): a cap of
	// 24 h made a longer delay-seconds a day's wait, under a MaxRetryAfter
	// past a day, where an HTTP-date asking for the same was waited for,
	// or returned at once past the deadline (review r53).
	const longest = int64(math.MaxInt64 / int64(time.Second))
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, longest)) * time.Second
	} else if errors.Is(err, strconv.ErrRange) && v[0] != '-' {
		// delay-seconds too large for an int64: as long as it gets (over
		// any MaxRetryAfter), not absent.
		return time.Duration(longest) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// backoff returns the wait after attempt n: MinBackoff doubled per attempt,
// capped at MaxBackoff, of which a random half.
func (t *Transport) backoff(n int) time.Duration {
	lo, hi := orDefault(t.MinBackoff, DefaultMinBackoff), orDefault(t.MaxBackoff, DefaultMaxBackoff)
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + mrand.N(d/2+1)
}

func orDefault[T int | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// cancelBody releases an attempt's timeout when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
