// Package idemhttp makes HTTP handlers idempotent with the Idempotency-Key
// header (IETF draft "The Idempotency-Key HTTP Header Field"), on the idem
// runtime.
//
//	h := idemhttp.Middleware(rt,
//		idemhttp.Scope(func(r *http.Request) string { return tenantOf(r) }),
//	)(mux)
//
// A request with an unsafe method (not GET, HEAD, OPTIONS, TRACE) and the
// header runs the handler at most once per (scope, operation, key); its
// response (status, headers less those that are never stored, body) is
// stored and replayed to duplicates with "Idempotent-Replayed: true".
//
// The key is one field, either an sf-string ("abc", as the draft writes it)
// or bare visible ASCII (abc, as most clients send it); both are the same
// key. A field that is empty, repeated, malformed or not 1 to 255 bytes of
// visible ASCII is 400, whether the route requires a key or not.
//
// The operation is the method and the route pattern ("POST /charges/{id}"):
// r.Pattern when the middleware sits inside a [http.ServeMux], or the pattern
// the wrapped ServeMux would route to. Without a pattern it is the method
// and the escaped path, or, for a long path, the method and a fixed-size
// digest of it. The fingerprint covers the method, the path, the query and
// the SHA-256 of the body: the same key with another fingerprint on the same
// operation (another body, or another resource of the same route) is 422.
// Only digests are stored, so the request's size never counts against the
// store's record limit.
//
// A duplicate of a request in flight waits up to the runtime's MaxWait,
// then gets 409 with Retry-After. Responses with status 5xx, 408 and 429
// release the key (see [RetryableStatus]); so does a panicking handler,
// whose panic is then re-raised for net/http (or an outer recoverer) to
// handle: the panic value is never sent to a client. A response too large
// for the store, and a streamed one (the handler flushed, or hijacked the
// connection), reaches the first client in full; the record says the
// request succeeded without a response to replay, and duplicates get 410
// Gone, stable for the record's TTL, without the handler running again.
//
// Every error the middleware writes itself is an RFC 9457 problem
// (application/problem+json) naming no operation, key or internal error;
// a store outage is 503 with Retry-After. See docs/http.md.
package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem/runtime"
)

// DefaultHeader is the request header carrying the key (IETF draft
// "The Idempotency-Key HTTP Header Field").
const DefaultHeader = "Idempotency-Key"

// ReplayedHeader is set to "true" on responses replayed from a record.
const ReplayedHeader = "Idempotent-Replayed"

// DefaultProblemBase prefixes the type URI of the problems the middleware
// writes; each type is this documentation's anchor for the problem.
const DefaultProblemBase = "https://github.com/idemkit/idem/blob/main/docs/http.md#"

// Option configures the middleware.
type Option func(*config)

type config struct {
	header      string
	required    bool
	scope       func(*http.Request) string
	operation   func(*http.Request) string
	maxBody     int64
	retryable   func(status int) bool
	drop        map[string]bool
	allow       map[string]bool
	logger      *slog.Logger
	problemBase string
}

// Header sets the request header that carries the key.
func Header(name string) Option { return func(c *config) { c.header = name } }

// Required makes requests with unsafe methods (not GET, HEAD, OPTIONS,
// TRACE) without a key fail with 400 instead of passing through.
func Required(required bool) Option { return func(c *config) { c.required = required } }

// Scope sets how the scope (tenant or principal) is found for a request.
// The default is the scope already in the request's context
// (runtime.WithScope), which an authentication middleware may have set.
func Scope(f func(*http.Request) string) Option { return func(c *config) { c.scope = f } }

// Operation sets how a request's operation is named; the default is the
// method and the route pattern (see the package documentation). A name over
// 255 bytes, or not UTF-8, is replaced by a fixed-size digest of it; it must
// not be empty nor contain control bytes.
func Operation(f func(*http.Request) string) Option { return func(c *config) { c.operation = f } }

// MaxBody limits the request body read for the fingerprint (default 1 MiB);
// larger requests get 413. The body is buffered, not stored: only its
// SHA-256 is.
func MaxBody(n int64) Option { return func(c *config) { c.maxBody = n } }

// RetryableStatus sets which response statuses release the key so that a
// retry runs the handler again (default: 5xx, 408, 429).
func RetryableStatus(f func(status int) bool) Option { return func(c *config) { c.retryable = f } }

// DropHeaders adds response headers that are never stored nor replayed, to
// the ones that never are (credentials, cookies, hop-by-hop and per-message
// headers: see [NeverStored]). The first client still gets them.
func DropHeaders(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.drop[http.CanonicalHeaderKey(n)] = true
		}
	}
}

// AllowHeaders switches to an allowlist: only these response headers are
// stored and replayed (Content-Type is always kept). Headers that are never
// stored ([NeverStored]) stay dropped even when listed.
func AllowHeaders(names ...string) Option {
	return func(c *config) {
		if c.allow == nil {
			c.allow = map[string]bool{"Content-Type": true}
		}
		for _, n := range names {
			c.allow[http.CanonicalHeaderKey(n)] = true
		}
	}
}

// Logger sets where the middleware logs what it does not tell clients
// (store errors, recording failures, panics); default slog.Default().
func Logger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// ProblemBase sets the prefix of the problem type URIs (default
// [DefaultProblemBase]); the type is the prefix and the problem's name,
// "key-reused" for example.
func ProblemBase(uri string) Option { return func(c *config) { c.problemBase = uri } }

// NeverStored returns the response headers that are never stored nor
// replayed, whatever the options: credentials and per-client state
// (Set-Cookie, Authorization, Authentication-Info, their Proxy- forms,
// WWW-Authenticate and Proxy-Authenticate, which may carry per-client
// nonces, Clear-Site-Data), hop-by-hop headers, Date, Trailer and the
// replay marker itself.
func NeverStored() []string {
	return []string{
		"Set-Cookie", "Set-Cookie2", "Authorization", "Proxy-Authorization",
		"Authentication-Info", "Proxy-Authentication-Info", "Www-Authenticate",
		"Proxy-Authenticate", "Clear-Site-Data",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Date", ReplayedHeader,
	}
}

func (c *config) stored(name string) bool {
	if c.drop[name] || strings.HasPrefix(name, http.TrailerPrefix) {
		return false
	}
	return c.allow == nil || c.allow[name]
}

// request is what the fingerprint covers: digests only, so that the stored
// request stays small whatever the body.
type request struct {
	Method     string `json:"method"`
	Target     string `json:"target"`
	BodyLen    int    `json:"body_len"`
	BodySHA256 string `json:"body_sha256"`
}

// Response is a recorded HTTP response.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
	// Streamed marks a response that was streamed to the first client (the
	// handler flushed or hijacked): its body is not stored, and duplicates
	// get 410 like any response that was not stored.
	Streamed bool `json:"streamed,omitempty"`
}

// Middleware returns the idempotency middleware on rt.
func Middleware(rt *runtime.Runtime, opts ...Option) func(http.Handler) http.Handler {
	cfg := &config{
		header: DefaultHeader, maxBody: 1 << 20, drop: map[string]bool{},
		logger: slog.Default(), problemBase: DefaultProblemBase,
		retryable: func(s int) bool {
			return s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests
		},
	}
	for _, o := range opts {
		o(cfg)
	}
	for _, n := range NeverStored() {
		cfg.drop[http.CanonicalHeaderKey(n)] = true
	}
	return func(next http.Handler) http.Handler {
		return &middleware{rt: rt, cfg: cfg, next: next}
	}
}

type middleware struct {
	rt   *runtime.Runtime
	cfg  *config
	next http.Handler
}

func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := m.cfg
	if safeMethod(r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	fields := r.Header.Values(cfg.header)
	switch {
	case len(fields) == 0 && cfg.required:
		m.problem(w, probKeyMissing, fmt.Sprintf("This request needs an %s header.", cfg.header))
		return
	case len(fields) == 0:
		m.next.ServeHTTP(w, r)
		return
	case len(fields) > 1:
		m.problem(w, probKeyInvalid, fmt.Sprintf("The request has %d %s fields; send exactly one.", len(fields), cfg.header))
		return
	}
	key, err := parseKey(fields[0])
	if err == nil {
		err = runtime.ValidateKey(key)
	}
	if err != nil {
		m.problem(w, probKeyInvalid, fmt.Sprintf("The %s header must be 1 to 255 bytes of visible ASCII, bare or as a quoted string.", cfg.header))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, cfg.maxBody+1))
	var tooLarge *http.MaxBytesError // an outer http.MaxBytesReader's limit
	if err != nil && !errors.As(err, &tooLarge) {
		m.problem(w, probBodyUnreadable, "The request body could not be read.")
		return
	}
	if tooLarge != nil || int64(len(body)) > cfg.maxBody {
		m.problem(w, probBodyTooLarge, fmt.Sprintf("The request body is over %d bytes.", cfg.maxBody))
		return
	}
	ctx := r.Context()
	if cfg.scope != nil {
		ctx = runtime.WithScope(ctx, cfg.scope(r))
	}
	sum := sha256.Sum256(body)
	target := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	var rw *writer // set when the handler ran in this request
	var handlerPanic *panicked
	resp, err := runtime.Do(ctx, m.rt, runtime.Call[request, Response]{
		Operation: m.operationOf(r),
		Key:       key,
		Request:   request{Method: r.Method, Target: digestIfLong(target, 1024), BodyLen: len(body), BodySHA256: hex.EncodeToString(sum[:])},
		Effect: func(ctx context.Context, _ request) (Response, error) {
			rw = &writer{w: w, header: http.Header{}, status: http.StatusOK}
			r2 := r.WithContext(ctx)
			r2.Body = io.NopCloser(bytes.NewReader(body))
			if handlerPanic = serveRecovering(m.next, rw, r2); handlerPanic != nil {
				return Response{}, runtime.Retryable(handlerPanicked{})
			}
			resp := rw.response(cfg)
			if cfg.retryable(resp.Status) {
				return resp, runtime.Retryable(&statusError{resp.Status})
			}
			return resp, nil
		},
	})
	if rw != nil { // this request ran the handler: its client gets what it wrote
		m.finish(w, r, rw, handlerPanic, err)
		return
	}
	switch {
	case err == nil && resp.Streamed:
		m.problem(w, probNotReplayable, "The request with this key succeeded; its response was streamed and is not stored, so it cannot be replayed.")
	case err == nil:
		writeResponse(w, resp)
	default:
		m.answer(w, r, err)
	}
}

// answer maps an error of runtime.Do for a request that did not run the
// handler to the problem its client gets.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, runtime.ErrNotReplayable):
		m.problem(w, probNotReplayable, "The request with this key succeeded; its response was too large to store, so it cannot be replayed.")
	case errors.Is(err, runtime.ErrInvalidKey):
		m.problem(w, probKeyInvalid, "The idempotency key, or the scope or route it is used on, is not valid.")
	case errors.Is(err, runtime.ErrKeyReused):
		m.problem(w, probKeyReused, "This idempotency key was used with another request (method, resource or body).")
	case errors.Is(err, runtime.ErrInProgress):
		m.problem(w, probInProgress, "A request with this key is still being processed; retry later.")
	case errors.Is(err, runtime.ErrOutcomeUnknown):
		m.problem(w, probOutcomeUnknown, "An earlier request with this key may or may not have taken effect; it is being reconciled. Retry later.")
	case errors.Is(err, runtime.ErrTooLarge):
		m.problem(w, probBodyTooLarge, "The request is too large to record.")
	default:
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: the idempotency store failed; answered 503", "method", r.Method, "target", r.URL.RequestURI(), "err", err)
		m.problem(w, probStoreUnavailable, "The idempotency store is unavailable; retry later.")
	}
}

// finish answers the client whose request ran the handler.
func (m *middleware) finish(w http.ResponseWriter, r *http.Request, rw *writer, p *panicked, err error) {
	var se *statusError
	if err != nil && p == nil && !errors.As(err, &se) {
		// The handler ran and answered: its client gets the answer, whatever
		// became of the record (the runtime logged what it could not write).
		m.cfg.logger.WarnContext(r.Context(), "idemhttp: the handler answered but its outcome was not recorded", "method", r.Method, "err", err)
	}
	if p != nil {
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: handler panicked; the key was released and the panic re-raised",
			"method", r.Method, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
		panic(p.value)
	}
	rw.commit()
}

// handlerPanicked is the effect's error when the handler panicked: the
// key is released, and the panic re-raised once the record is.
type handlerPanicked struct{}

func (handlerPanicked) Error() string { return "idemhttp: handler panicked" }

type panicked struct {
	value any
	stack []byte
}

func serveRecovering(h http.Handler, w http.ResponseWriter, r *http.Request) (p *panicked) {
	defer func() {
		if v := recover(); v != nil {
			p = &panicked{value: v, stack: debug.Stack()}
		}
	}()
	h.ServeHTTP(w, r)
	return nil
}

// operationOf names the operation of r (see the package documentation).
func (m *middleware) operationOf(r *http.Request) string {
	if m.cfg.operation != nil {
		return digestIfLong(m.cfg.operation(r), runtime.MaxKeyLen)
	}
	pattern := r.Pattern
	if pattern == "" {
		if mux, ok := m.next.(interface {
			Handler(*http.Request) (http.Handler, string)
		}); ok {
			_, pattern = mux.Handler(r)
		}
	}
	if pattern == "" {
		return r.Method + " " + digestIfLong(r.URL.EscapedPath(), 128)
	}
	if !strings.ContainsAny(pattern, " \t") { // a pattern without a method
		pattern = r.Method + " " + pattern
	}
	return digestIfLong(pattern, runtime.MaxKeyLen)
}

// digestIfLong returns s when it is at most n bytes of valid UTF-8, and a
// fixed-size name derived from it otherwise: its first 64 bytes and its
// SHA-256.
func digestIfLong(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return strings.ToValidUTF8(s[:min(len(s), 64)], "") + "…#sha256:" + hex.EncodeToString(sum[:])
}

// parseKey reads the key from a header field: an sf-string (RFC 8941
// section 3.3.3) or bare visible ASCII without commas.
func parseKey(field string) (string, error) {
	field = strings.TrimSpace(field)
	if field == "" {
		return "", errors.New("empty field")
	}
	if field[0] != '"' {
		if strings.ContainsAny(field, `,"`) {
			return "", errors.New("a bare key must not contain commas or quotes")
		}
		return field, nil
	}
	var b strings.Builder
	for i := 1; i < len(field); i++ {
		switch c := field[i]; {
		case c == '\\':
			i++
			if i == len(field) || (field[i] != '"' && field[i] != '\\') {
				return "", errors.New("bad escape in sf-string")
			}
			b.WriteByte(field[i])
		case c == '"':
			if i != len(field)-1 {
				return "", errors.New("data after the sf-string")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errors.New("bad byte in sf-string")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated sf-string")
}

type statusError struct{ status int }

func (e *statusError) Error() string { return "handler answered " + strconv.Itoa(e.status) }

func writeResponse(w http.ResponseWriter, resp Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	h.Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
