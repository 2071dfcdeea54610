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
// The operation is the method and the route pattern as the client sees the
// route ("POST /charges/{id}") when a pattern pins the route: the pattern of
// the wrapped [http.ServeMux] (of the innermost ServeMux when it routes to
// another) or r.Pattern when the middleware sits inside one, with the
// prefix an [http.StripPrefix] took off put back ("POST /refunds/{id}" for
// a sub-mux's "POST /{id}" mounted at /refunds/), so that two mounted
// sub-muxes never share identities. A pattern that ends in "/" or in a
// "{name...}" wildcard does not pin the route (its handler may route
// further, by path or host, out of the middleware's sight): then, as
// without a pattern, the operation is the request as the client sent it,
// the method, the Host and the escaped path, marked as such ("POST
// api.example/charges/c1 as sent", a name no pattern has), followed by
// the pattern when a ServeMux routed the request by one ("... as sent via
// /": a ServeMux matches a host exactly as sent, so a request it routes to
// another pattern is another route), or, over 255 bytes, a fixed-size
// digest of it. A pattern under a host mount of an outer ServeMux
// ("a.example/") takes that host when it has none ("POST a.example/pay"
// for an inner mux's "POST /pay"): two services mounted by host never
// share a route's name (put the middleware around the outer mux or around
// the inner one: inside the inner mux, r.Pattern no longer names the
// mount). A scope over 255 bytes is
// replaced by a digest the same way, and so is any scope or operation that
// contains the digests' marker "…#sha256:", so that two scopes never share
// a name. The fingerprint covers the method, the path and query as
// sent, and the SHA-256 of the body: the same key with another fingerprint
// on the same operation (another body, or another resource of the same
// route) is 422. Only digests are stored (unless the route has a [Query]),
// so the request's size never counts against the store's record limit.
//
// A duplicate of a request in flight waits up to the runtime's MaxWait,
// then gets 409 with Retry-After. Responses with status 5xx, 408 and 429
// release the key (see [RetryableStatus]), except those that leave the
// outcome unknown: 504 (a downstream timed out) and a retryable status
// written after the request's context ended record UNKNOWN, whatever the
// runtime's error policy, so a retry never runs an effect that may have
// happened (a [Query] or a runtime.NoQueryPolicy converges them). Put
// [http.TimeoutHandler] outside the middleware, never inside: inside, its
// 503 while the handler still runs reaches the middleware as the handler's
// answer, with the request's context alive, and releases the key, so a
// retry runs the handler again; outside, its deadline is the request's
// context and the handler's response is recorded. Any handler-side timeout
// that answers while the work goes on must answer 504, no other 5xx. A
// panicking handler releases the key; its panic is then re-raised for
// net/http (or an outer recoverer) to handle: the panic value is never sent
// to a client. A response too large for the store, and a streamed one (the
// handler flushed, or hijacked the connection), reaches the first client in
// full; the record says the request succeeded without a response to
// replay, and duplicates get 410 Gone, stable for the record's TTL, without
// the handler running again.
//
// Every error the middleware writes itself is an RFC 9457 problem
// (application/problem+json) naming no operation, key or internal error: a
// request that failed for good (resolved as failed, by hand or by policy)
// is 422 "failed" with the stored code and message; a store outage is 503
// with Retry-After. docs/http.md has the answer to every error of
// runtime.Do.
package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/errtree"
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
	headerKey   string // header, canonical
	required    bool
	scope       func(*http.Request) string
	operation   func(*http.Request) string
	maxBody     int64
	retryable   func(status int) bool
	drop        map[string]bool
	allow       map[string]bool
	logger      *slog.Logger
	problemBase string
	// rawQueries and queryOpts are the [Query] options by operation;
	// queries the same, wrapped for runtime.Do.
	rawQueries map[string]QueryFunc
	queryOpts  map[string]runtime.QueryOptions
	queries    map[string]runtime.QueryFunc[request, Response]
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
// method and the route pattern as the client sees it (see the package
// documentation). A name over
// 255 bytes, or not UTF-8, is replaced by a fixed-size digest of it; it must
// not be empty nor contain control bytes.
func Operation(f func(*http.Request) string) Option { return func(c *config) { c.operation = f } }

// MaxBody limits the request body read for the fingerprint (default 1 MiB);
// larger requests get 413. The body is buffered, not stored: only its
// SHA-256 is.
func MaxBody(n int64) Option { return func(c *config) { c.maxBody = n } }

// RetryableStatus sets which response statuses release the key so that a
// retry runs the handler again (default: 5xx, 408, 429). Of these, 504 and
// any written after the request's context ended record UNKNOWN instead; a
// status not listed is stored and replayed.
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
// request stays small whatever the body. URL and Body are stored only for a
// route with a [Query], for the query.
type request struct {
	Method     string `json:"method"`
	Target     string `json:"target"`
	BodyLen    int    `json:"body_len"`
	BodySHA256 string `json:"body_sha256"`
	URL        string `json:"url,omitempty"`
	Body       []byte `json:"body,omitempty"`
	// Scope is the scope the handler saw, stored for the query when the
	// identity's is a digest of it (over 255 bytes, or not valid UTF-8);
	// otherwise the identity's scope is the scope. ScopeBytes holds it
	// instead when it is not valid UTF-8 (JSON text would not keep it).
	Scope      string `json:"scope,omitempty"`
	ScopeBytes []byte `json:"scope_bytes,omitempty"`
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
	// Truncated marks the short form of a response too large for the
	// store (see Cut): its status is kept, its headers and body are not,
	// and duplicates get 410 saying what the status was.
	Truncated bool `json:"truncated,omitempty"`
}

// Cut returns what is kept of r when the store refuses it as too large
// (runtime.Cutter): its status, so that a duplicate learns what the first
// answer was (a 422 stays a client error, never a success).
func (r Response) Cut() Response { return Response{Status: r.Status, Truncated: true} }

// notReplayable says why a response cannot be replayed and what the first
// answer was: its status and class when known, never "succeeded" for an
// answer that was not a success.
func notReplayable(status int, why string) string {
	switch {
	case status == 0:
		return "The request with this key was answered; its response " + why + ", so it cannot be replayed, and the request is not run again."
	case status < 300:
		return fmt.Sprintf("The request with this key succeeded (answered %d); its response %s, so it cannot be replayed.", status, why)
	}
	class := "a redirection"
	switch {
	case status >= 500:
		class = "a server error"
	case status >= 400:
		class = "a client error"
	}
	return fmt.Sprintf("The request with this key was answered %d (%s); its response %s, so it cannot be replayed, and the request is not run again.", status, class, why)
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
	cfg.headerKey = http.CanonicalHeaderKey(cfg.header)
	for _, n := range NeverStored() {
		cfg.drop[http.CanonicalHeaderKey(n)] = true
	}
	cfg.queries = map[string]runtime.QueryFunc[request, Response]{}
	for op, q := range cfg.rawQueries {
		rq := cfg.query(q)
		cfg.queries[op] = rq
		// Register fails only for an empty operation or a nil query, and
		// neither can be here.
		_ = runtime.Register(rt, op, rq, cfg.queryOpts[op])
	}
	return func(next http.Handler) http.Handler {
		return &middleware{rt: rt, cfg: cfg, next: next}
	}
}

type middleware struct {
	rt   *runtime.Runtime
	cfg  *config
	next http.Handler
	ops  opCache
}

func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		"": // net/http: "an empty string means GET" (review r53)
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
	fields := r.Header[cfg.headerKey]
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
	// The handler sees the scope as it is; the identity gets a fixed-size
	// name for a scope over 255 bytes (a long SPIFFE ID), which is the
	// server's business, not the client's error. The context gains a value
	// only when the identity's scope is not already the context's.
	ctx := r.Context()
	var scope string
	if cfg.scope != nil {
		scope = cfg.scope(r)
	} else {
		scope = runtime.ScopeFrom(ctx)
	}
	idScope := idname.Fit(scope, runtime.MaxKeyLen)
	if cfg.scope != nil || idScope != scope {
		ctx = runtime.WithScope(ctx, idScope)
	}
	// The path the middleware sees, escaped as sent: what original and
	// operationOf compare the client's target and a pattern with.
	cur := escapedPath(r.URL)
	origPath, target := original(r, cur)
	pattern, redirect := routePattern(m.next, r)
	if redirect {
		// The wrapped mux answers this request with a redirect of its own
		// (ServeMux's, to the clean spelling of a path with dot-segments
		// or empty segments, or /tree to /tree/): no handler runs.
		// Recorded, the redirect would be replayed to the redirected
		// request, the same request to the middleware when it is the
		// clean spelling, and to itself.
		m.next.ServeHTTP(w, r)
		return
	}
	op := m.operationOf(r, origPath, cur, pattern)
	if id, ok := m.rt.Running(ctx); ok && id == (runtime.Identity{Scope: idScope, Operation: op, Key: key}) {
		// This request's own call is running, its record in this
		// middleware's store: a second placement of the middleware on its
		// way to the handler (around the mux and around the route). The
		// outer one holds the claim and records what the handler answers;
		// claiming again would wait on itself. (An outer placement on
		// another store claimed nothing here: this one claims.)
		m.next.ServeHTTP(w, r)
		return
	}
	// The target as one spelling (see canonicalTarget); the query sees
	// it as sent (URL, below).
	ct := idname.Fit(canonicalTarget(target), 1024)
	m.deferToInner(r, idScope, key, ct)
	// x lives until ServeHTTP returns, and so do the pooled buffers of the
	// request's body and of the handler's response (see exchange.release).
	x := &exchange{m: m, w: w, r: r, idScope: idScope, key: key, target: ct}
	defer x.release()
	body, err := x.readBody(cfg.maxBody)
	tooLarge := err != nil && isMaxBytes(err) // an outer http.MaxBytesReader's limit
	if err != nil && !tooLarge {
		m.problem(w, probBodyUnreadable, "The request body could not be read.")
		return
	}
	if tooLarge || int64(len(body)) > cfg.maxBody {
		m.problem(w, probBodyTooLarge, fmt.Sprintf("The request body is over %d bytes.", cfg.maxBody))
		return
	}
	sum := sha256.Sum256(body)
	var sumHex [2 * sha256.Size]byte
	hex.Encode(sumHex[:], sum[:])
	rq := request{Method: r.Method, Target: ct, BodyLen: len(body), BodySHA256: string(sumHex[:])}
	if idScope != scope {
		x.scope, x.rescope = scope, true
	}
	c := runtime.Call[request, Response]{Operation: op, Key: key, Request: rq, Effect: x.effect}
	// The fingerprint covers the digests only, whether or not the request
	// is stored for a query. Without a query the request is those digests,
	// and the runtime takes the same SHA-256 of the same encoding itself.
	query := cfg.queries[op]
	if query == nil {
		// Another placement of the middleware on this runtime (around a
		// route, inside this one) may have the route's query: the call
		// that claims runs with it.
		query, _ = runtime.RegisteredQuery[request, Response](m.rt, op)
	}
	if query != nil {
		fpBytes, err := m.rt.Codec().Marshal(rq)
		if err != nil {
			m.answer(w, r, err)
			return
		}
		c.Fingerprint = runtime.Fingerprint(fpBytes)
		c.Query = query
		// The stored request outlives this one (a reconciler, the query
		// itself): its body must not be the pooled buffer.
		c.Request.URL, c.Request.Body = target, bytes.Clone(body)
		if x.rescope {
			c.Request.Scope, c.Request.ScopeBytes = idname.StoreScope(scope)
		}
	}
	resp, err := runtime.Do(ctx, m.rt, c)
	if x.ran { // this request ran the handler: its client gets what it wrote
		m.finish(w, r, &x.rw, x.panic, err)
		return
	}
	switch {
	case err == nil && resp.Streamed:
		m.problem(w, probNotReplayable, notReplayable(resp.Status, "was streamed and is not stored"))
	case err == nil && resp.Truncated:
		m.problem(w, probNotReplayable, notReplayable(resp.Status, "was too large to store"))
	case err == nil:
		writeResponse(w, resp)
	case errtree.SafeIs(err, runtime.ErrNotRecorded) && resp.Status != 0:
		// The route's query found the request done, and the store could
		// not record it: its response is the answer (the runtime's
		// ErrNotRecorded), as a client whose handler ran gets its own.
		m.cfg.logger.WarnContext(ctx, "idemhttp: the query found the request done but its outcome was not recorded", "method", r.Method, "err", err)
		writeResponse(w, resp)
	default:
		m.answer(w, r, err)
	}
}

// exchange is one request that may run the handler: what the effect needs,
// with the writer that records the response, in one allocation.
type exchange struct {
	m    *middleware
	w    http.ResponseWriter
	r    *http.Request
	body []byte
	// key and target (its idempotency key, and its target as one
	// spelling) are the request as the client sent it: an inner placement
	// whose request has both, and the same method and host, is holding
	// this very request (see deferToInner). The method is the one of the
	// request that reached the handler (safe methods pass through).
	// idScope is the identity's scope, which this middleware re-entered
	// compares too.
	key, target, idScope string
	// scope is the scope as the handler sees it, when rescope says that the
	// identity's (in the runtime's context) is another.
	scope   string
	rescope bool
	// ran is set when the handler ran in this request; panic when it
	// panicked.
	ran    bool
	panic  *panicked
	rw     writer
	reader bodyReader
	// ectx is the context the runtime runs the effect with (the call's
	// attempt), once it runs.
	ectx context.Context
	// deferred is set by a placement of the middleware inside this one's
	// handler that claims the request in a store of its own (see
	// deferToInner).
	deferred atomic.Bool
}

// outerKey is the context key under which a running exchange is known to
// the placements of the middleware inside its handler.
type outerKey struct{}

// deferToInner tells the placement of the middleware whose handler is
// running r, if any, that this placement claims the request in another
// store (a per-process middleware around the mux, this one around the
// route on its shared store): the outer one then records nothing for the
// request and releases its key, whatever the handler answers. This one's
// record is the request's (its reconciler converges it; its in-progress
// and outcome-unknown answers are not final): recorded in the outer store
// too, an answer would be replayed there long after it stopped being true
// (a 409 in-progress, Idempotent-Replayed, which clients never retry; an
// UNKNOWN no reconciler of the outer store converges).
//
// Only for the outer one's own request: the same idempotency key, target,
// method and host as the client sent them; and, for this very middleware
// re-entered in-process (its scope function is the outer one's), the same
// scope. Two placements may scope a request differently (an option on one
// of them only), and may name it differently on one store too (the outer
// one around http.MaxBytesHandler(mux), or a StripPrefix sub-mux, names
// it as sent; the inner one by the route's pattern). The placements may
// name the request differently (the outer one around a handler that calls
// the mux, or around a top mux with a StripPrefix mount, names it by its
// path, the inner one by the route's pattern), and a middleware between
// them may wrap or change the body (http.MaxBytesHandler, a decompressor):
// it is still the request. A request the handler makes itself (an
// in-process call, on the request's context) is its own, and its claim
// leaves the outer record alone: to another target or host, even with the
// client's key, or to the same one with another key.
func (m *middleware) deferToInner(r *http.Request, idScope, key, target string) {
	x, ok := r.Context().Value(outerKey{}).(*exchange)
	if !ok || x.key != key || x.target != target || x.r.Method != r.Method ||
		canonicalHost(x.r.Host, x.r.TLS != nil) != canonicalHost(r.Host, r.TLS != nil) {
		return
	}
	if x.m == m && x.idScope != idScope {
		return // re-entered for another tenant: another request
	}
	x.deferred.Store(true)
	// Should the handler leave without returning (runtime.Goexit), the
	// outer call releases its claim as it would on return.
	runtime.ReleaseOnLeave(x.ectx)
}

// errDeferred releases the key of a request an inner placement claimed in
// its own store (see deferToInner).
var errDeferred = errors.New("idemhttp: a placement of the middleware inside this one, on another store, holds the request's record")

// effect runs the handler for runtime.Do.
func (x *exchange) effect(ctx context.Context, _ request) (Response, error) {
	cfg := x.m.cfg
	x.ran, x.ectx = true, ctx
	x.rw.reset(x.w)
	if x.rescope {
		ctx = runtime.WithScope(ctx, x.scope)
	}
	r2 := x.r.WithContext(context.WithValue(ctx, outerKey{}, x))
	x.reader.rewind(x.body)
	r2.Body = &x.reader
	x.panic = serveRecovering(x.m.next, &x.rw, r2)
	x.rw.finish() // the handler returned: its writer changes nothing more
	if x.panic != nil {
		return Response{}, runtime.Retryable(handlerPanicked{})
	}
	if x.deferred.Load() {
		return Response{}, runtime.Retryable(errDeferred)
	}
	return cfg.outcome(ctx, x.rw.response(cfg))
}

// release gives the buffers of the request's body and of the response
// back to the pool, once the client has the response and the runtime has
// encoded the record (Do has returned), or the request failed before. A
// handler that kept the request's body or its writer past its return gets
// errors from them, never another request's bytes.
func (x *exchange) release() {
	x.rw.release()
	x.reader.release()
}

// readBody reads the request's body (see readBody) into a pooled buffer,
// which x.reader serves to the handler.
func (x *exchange) readBody(max int64) ([]byte, error) {
	bp := bufPool.Get().(*[]byte)
	b, err := readBody(x.r.Body, x.r.ContentLength, max, (*bp)[:0])
	*bp = b[:0] // the buffer b grew into, if it did
	x.body = b
	x.reader.buf = bp
	x.reader.r.Reset(b)
	return b, err
}

// bodyReader is the request body the handler reads: the bytes the
// middleware read for the fingerprint, in a pooled buffer. mu guards it:
// once released (the handler returned), reads fail as reads of a closed
// body do, and the buffer goes back to the pool.
type bodyReader struct {
	mu       sync.Mutex
	r        bytes.Reader
	buf      *[]byte
	released bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

// WriteTo keeps io.Copy from the body free of a copy buffer, as the
// bytes.Reader it reads from does.
func (b *bodyReader) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.WriteTo(w)
}

func (*bodyReader) Close() error { return nil }

// rewind serves the body from its start (to the handler of an effect).
func (b *bodyReader) rewind(body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.r.Reset(body)
}

func (b *bodyReader) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.released = true
	b.r.Reset(nil)
	putBuf(b.buf)
	b.buf = nil
}

// readBody reads r to its end, or to max+1 bytes (then the body is over the
// limit), into dst, which it grows only when the length is unknown or dst
// is too small for it. A declared length is trusted up to maxUpfront: past
// it the buffer grows as the bytes arrive, so that a client cannot make the
// server allocate a large body it never sends.
func readBody(r io.Reader, length, max int64, dst []byte) ([]byte, error) {
	if r == nil { // a request built without a body
		return dst[:0], nil
	}
	size := int64(512)
	if length >= 0 {
		size = min(length, max, maxUpfront) + 1 // +1: EOF is seen without growing
	}
	b := dst[:0]
	if int64(cap(b)) < size {
		b = make([]byte, 0, size)
	}
	for int64(len(b)) <= max {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(int64(cap(b)), max+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

const maxUpfront = 64 << 10

// isMaxBytes reports whether err is an outer http.MaxBytesReader's limit.
func isMaxBytes(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// outcome maps the response a handler wrote to what the runtime records.
// A retryable status (see [RetryableStatus]) that says the outcome is
// unknown is UNKNOWN, whatever the runtime's error policy: 504 (a
// downstream timed out: the effect may have happened), or any retryable
// status written after the request's context ended (the handler gave up
// waiting on something that may have acted). Other retryable statuses
// release the key; everything else is stored and replayed.
func (cfg *config) outcome(ctx context.Context, resp Response) (Response, error) {
	switch {
	case !cfg.retryable(resp.Status):
		return resp, nil
	case ctx.Err() != nil:
		return resp, &uncertainStatus{resp.Status, []error{ctx.Err(), context.Cause(ctx)}}
	case resp.Status == http.StatusGatewayTimeout:
		return resp, &uncertainStatus{resp.Status, []error{errGatewayTimeout}}
	}
	return resp, runtime.Retryable(&statusError{resp.Status})
}

// answer maps an error of runtime.Do for a request that did not run the
// handler to the problem its client gets. Every error Do returns has its
// answer (see the table in docs/http.md); only what is left is a store
// outage.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, err error) {
	var (
		fe *runtime.FailedError
		re *recordError
	)
	ctx := r.Context()
	var syn *json.SyntaxError
	switch {
	case errtree.SafeAs(err, &re), errtree.SafeAs(err, &syn):
		// A stored record that is not one JSON value (resolved by hand
		// through runtime.Resolve) fails before the record's own reader
		// runs: unreadable too (review r57).
		// Before ErrNotReplayable, which the runtime wraps around a stored
		// response it cannot decode: a record of this middleware's that it
		// cannot read (one resolved by hand in a wrong form) is not a
		// response left unstored.
		m.cfg.logger.ErrorContext(ctx, "idemhttp: the stored outcome cannot be read; answered 500", "method", r.Method, "target", r.URL.RequestURI(), "err", err)
		m.problem(w, probRecordUnreadable, "The stored outcome of the request with this key cannot be read.")
	case errtree.SafeIs(err, runtime.ErrNotReplayable):
		m.problem(w, probNotReplayable, notReplayable(0, "was too large to store"))
	case errtree.SafeIs(err, runtime.ErrInvalidKey):
		m.problem(w, probKeyInvalid, "The idempotency key is not valid.")
	case errtree.SafeIs(err, runtime.ErrKeyReused):
		m.problem(w, probKeyReused, "This idempotency key was used with another request (method, resource or body).")
	case errtree.SafeIs(err, runtime.ErrInProgress), errtree.SafeIs(err, runtime.ErrLeaseLost):
		// ErrLeaseLost: another worker took the request over while this
		// one asked the query; it is in progress there.
		m.problem(w, probInProgress, "A request with this key is still being processed; retry later.")
	case errtree.SafeIs(err, runtime.ErrOutcomeUnknown):
		m.problem(w, probOutcomeUnknown, "An earlier request with this key may or may not have taken effect; it is being reconciled. Retry later.")
	case errtree.SafeAs(err, &fe):
		m.failed(w, fe.Code, fe.Message)
	case errtree.SafeIs(err, runtime.ErrPermanent):
		m.failed(w, "", "The request with this key failed.")
	case errtree.SafeIs(err, runtime.ErrTooLarge):
		m.problem(w, probBodyTooLarge, "The request is too large to record.")
	case errtree.SafeIs(context.Cause(ctx), runtime.ErrLeaseLost):
		// A placement of the middleware around this one (on another
		// store) could not confirm its lease and stopped its handler,
		// this request's wait or claim with it: the client did not
		// cancel, and the request is in progress there.
		m.problem(w, probInProgress, "A request with this key is still being processed; retry later.")
	case ctx.Err() != nil:
		// The request's own deadline passed, or it was cancelled, while
		// the runtime waited or read: nothing to log.
		m.cfg.logger.DebugContext(ctx, "idemhttp: the request ended before its outcome was known", "method", r.Method, "err", err)
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			m.problem(w, probTimeout, "The request's deadline passed before its outcome was known: while it waited for the request in flight with this key, or for the idempotency store.")
			return
		}
		m.problem(w, probCanceled, "The request was canceled before its outcome was known: while it waited for the request in flight with this key, or for the idempotency store.")
	default:
		m.cfg.logger.ErrorContext(ctx, "idemhttp: the idempotency store failed; answered 503", "method", r.Method, "target", r.URL.RequestURI(), "err", err)
		m.problem(w, probStoreUnavailable, "The idempotency store is unavailable; retry later.")
	}
}

// uncertainStatus is a response that leaves the outcome unknown (see
// config.outcome). It unwraps to the context's error and cause, or to
// errGatewayTimeout: runtime.Uncertain, so the record is UNKNOWN.
type uncertainStatus struct {
	status int
	causes []error
}

func (e *uncertainStatus) Error() string {
	return "handler answered " + strconv.Itoa(e.status) + ": " + errors.Join(e.causes...).Error()
}
func (e *uncertainStatus) Unwrap() []error { return e.causes }

// errGatewayTimeout is the cause of a 504: a downstream timed out.
var errGatewayTimeout error = gatewayTimeout{}

type gatewayTimeout struct{}

func (gatewayTimeout) Error() string { return "a downstream timed out (504)" }
func (gatewayTimeout) Timeout() bool { return true }

// finish answers the client whose request ran the handler.
func (m *middleware) finish(w http.ResponseWriter, r *http.Request, rw *writer, p *panicked, err error) {
	if err != nil && p == nil && !handlerAnswer(err) && !errtree.SafeIs(err, errDeferred) {
		// The handler ran and answered: its client gets the answer, whatever
		// became of the record (the runtime logged what it could not write).
		// A request an inner placement claimed is released by design.
		m.cfg.logger.WarnContext(r.Context(), "idemhttp: the handler answered but its outcome was not recorded", "method", r.Method, "err", err)
	}
	if p != nil {
		m.cfg.logger.ErrorContext(r.Context(), "idemhttp: handler panicked; the key was released and the panic re-raised",
			"method", r.Method, "panic", fmt.Sprint(p.value), "stack", string(p.stack))
		panic(p.value)
	}
	rw.commit()
}

// handlerAnswer reports whether err is the handler's answer (a status that
// released the key or left the outcome unknown), not the record's failure.
func handlerAnswer(err error) bool {
	var (
		se *statusError
		us *uncertainStatus
	)
	return errtree.SafeAs(err, &se) || errtree.SafeAs(err, &us)
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
	returned := false
	defer func() {
		if !returned { // recover's value is nil for panic(nil) under GODEBUG=panicnil=1
			p = &panicked{value: recover(), stack: debug.Stack()}
		}
	}()
	h.ServeHTTP(w, r)
	returned = true
	return nil
}

// operationOf names the operation of r (see the package documentation).
// origPath is the escaped path as the client sent it, cur the one the
// middleware sees (escapedPath(r.URL)).
func (m *middleware) operationOf(r *http.Request, origPath, cur, pattern string) string {
	if m.cfg.operation != nil {
		return idname.Fit(m.cfg.operation(r), runtime.MaxKeyLen)
	}
	// The wrapped mux's pattern (routePattern), when there is one, is
	// matched against the path the middleware sees; r.Pattern was set by a
	// mux outside, which saw either the same path or, through
	// http.StripPrefix, a longer one.
	if pattern == "" {
		pattern = r.Pattern
	} else {
		pattern = withHostOf(pattern, r.Pattern) // an outer mux's host mount
	}
	method, rest, ok := strings.Cut(pattern, " ")
	if !ok {
		method, rest = r.Method, pattern // a pattern without a method
	} else {
		rest = strings.TrimLeft(rest, " \t")
	}
	host, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, path = rest[:i], rest[i:]
	}
	if !pins(path) {
		// No pattern, or one that leaves the rest of the route to a handler
		// the middleware cannot see (a mount "/api/", a catch-all
		// "/{rest...}", "/"): that handler may route by path or by host, so
		// the request as the client sent it is the operation, marked "as
		// sent": these names share a pattern's syntax, and the plain
		// handler of another middleware on the same runtime, reached as
		// POST a.example/pay, must never meet a mux's pinned "POST
		// a.example/pay". A ServeMux matches a pattern's host exactly as
		// sent ("A.example" is not "a.example" to it): a request it routes
		// by such a pattern names the pattern too ("… as sent via /"), so
		// that it never meets a request the mux routes elsewhere.
		return asSent(r, origPath, pattern)
	}
	// A pattern's path may hold spaces (ServeMux takes "/pay at /eu"): in
	// the name they are escaped, so that a pinned name never spells the
	// marked names below ("… as sent", "… at /path").
	pname := spacesEscaped(path)
	switch {
	case matches(path, origPath):
		// No prefix was stripped, or the pattern is an outer mux's.
	case cur == origPath:
		// A pattern that matches neither the path the middleware sees nor
		// a longer one is not this request's route: r.Pattern copied by
		// r.Clone into a request the handler sends elsewhere in-process,
		// to a route no pattern pins.
		return asSent(r, origPath, "")
	case strings.HasSuffix(origPath, cur) && matches(path, cur):
		// Mounted under a prefix (http.StripPrefix): the operation is the
		// route as the client sees it, "POST /refunds/{id}".
		return idname.Fit(method+" "+host+canonicalEscapes(strings.TrimSuffix(origPath, cur))+pname, runtime.MaxKeyLen)
	default:
		// The path was rewritten some other way: the pattern alone would
		// name two different routes alike, so the client's path goes in.
		return idname.Fit(method+" "+host+pname+" at "+canonicalEscapes(origPath), runtime.MaxKeyLen)
	}
	return m.ops.name(method, rest, func() string { return idname.Fit(method+" "+host+pname, runtime.MaxKeyLen) })
}

// spacesEscaped returns p with each space and tab escaped ("%20", "%09");
// p itself when it has none.
func spacesEscaped(p string) string {
	if strings.IndexByte(p, ' ') < 0 && strings.IndexByte(p, '\t') < 0 {
		return p
	}
	return strings.NewReplacer(" ", "%20", "\t", "%09").Replace(p)
}

// asSent names the operation of a request no pattern pins: the request as
// the client sent it, "via" the pattern that mounts it, if any.
func asSent(r *http.Request, origPath, pattern string) string {
	op := r.Method + " " + canonicalHost(r.Host, r.TLS != nil) + canonicalPath(origPath) + " as sent"
	if pattern != "" {
		op += " via " + pattern
	}
	return idname.Fit(op, runtime.MaxKeyLen)
}

// opCache holds the operation names of the patterns a middleware has seen
// pin a route as is, so that a request names its operation without
// building the string: a copy-on-write map, read without a lock. It holds
// at most maxOps names (a pattern without a method gets one per method a
// client sends); past that, names are built every time.
type opCache struct {
	m  atomic.Pointer[map[opKey]string]
	mu sync.Mutex
}

type opKey struct{ method, rest string }

const maxOps = 256

// name returns the name of (method, rest), made by build the first time.
func (c *opCache) name(method, rest string, build func() string) string {
	if m := c.m.Load(); m != nil {
		if name, ok := (*m)[opKey{method, rest}]; ok {
			return name
		}
	}
	name := build()
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxOps {
		return name
	}
	var next map[opKey]string
	if old == nil {
		next = map[opKey]string{}
	} else {
		next = maps.Clone(*old)
	}
	next[opKey{method, rest}] = name
	c.m.Store(&next)
	return name
}

// maxMuxDepth bounds how many nested muxes routePattern looks through.
const maxMuxDepth = 8

// routePattern returns the pattern h routes r to, when h is a mux (an
// [http.ServeMux], or anything with its Handler method): the innermost
// one when the handler it routes to is a mux in turn (an API mux mounted
// on an outer mux's "/api/", a host-routing mux behind "/"), so that the
// pattern names the route itself, not the mount. It is "" when h is no
// mux or routes r nowhere. redirect reports that a mux answers r with a
// redirect and runs no handler: [http.ServeMux] does for a path that is
// not clean (dot-segments, empty segments: to its clean spelling) and for
// /tree when only /tree/ is registered; so does a route registered with
// [http.RedirectHandler], which has no effect to record either.
func routePattern(h http.Handler, r *http.Request) (pattern string, redirect bool) {
	for range maxMuxDepth {
		mux, ok := h.(interface {
			Handler(*http.Request) (http.Handler, string)
		})
		if !ok {
			break
		}
		next, p := mux.Handler(r)
		if next != nil && reflect.TypeOf(next) == redirectHandler {
			return "", true
		}
		if p == "" {
			break // an inner mux routes r nowhere (404): the mount it is
		}
		pattern, h = withHostOf(p, pattern), next
	}
	return pattern, false
}

// redirectHandler is the type of the handlers [http.RedirectHandler]
// returns, which ServeMux.Handler returns for the redirects it makes
// itself.
var redirectHandler = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// withHostOf returns pattern with the host of outer, the pattern of a mux
// that routed to pattern's (a host mount, "a.example/"), in front when
// pattern has none: "POST /pay" under "a.example/" is "POST a.example/pay",
// so that two services mounted by host never share a route's name.
func withHostOf(pattern, outer string) string {
	host := func(p string) (method, host, rest string) {
		method, rest, ok := strings.Cut(p, " ")
		if !ok {
			method, rest = "", p
		} else {
			rest = strings.TrimLeft(rest, " \t")
		}
		if i := strings.IndexByte(rest, '/'); i > 0 {
			return method, rest[:i], rest[i:]
		}
		return method, "", rest
	}
	_, oh, _ := host(outer)
	if oh == "" {
		return pattern
	}
	method, h, rest := host(pattern)
	if h != "" || !strings.HasPrefix(rest, "/") {
		return pattern
	}
	if method == "" {
		return oh + rest
	}
	return method + " " + oh + rest
}

// pins reports whether the path of a ServeMux pattern names one route: it
// does not end in "/" (a subtree, "/" included) nor in a "{name...}"
// wildcard, either of which hands the rest of the path to its handler.
func pins(path string) bool {
	if path == "" || strings.HasSuffix(path, "/") {
		return false
	}
	last := path[strings.LastIndexByte(path, '/')+1:]
	return !(strings.HasPrefix(last, "{") && strings.HasSuffix(last, "...}"))
}

// matches reports whether the path of a ServeMux pattern could have
// matched path, an escaped path: segment by segment, "{name}" matching any
// one segment, "{name...}" and a trailing slash the rest, "{$}" the end,
// and a literal segment matching the path's segment, both unescaped, as
// ServeMux matches them ("pay_now" matches "p%61y_now", and a pattern's
// "a%2Fb" matches "a%2fb").
func matches(pattern, path string) bool {
	if pattern == "" {
		return false
	}
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, p := range ps {
		switch {
		case p == "{$}":
			return i == len(xs)-1 && xs[i] == ""
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "...}"):
			return i < len(xs)
		case i == len(ps)-1 && p == "":
			return i < len(xs) // a trailing slash: a prefix
		case i >= len(xs):
			return false
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}"):
			if xs[i] == "" {
				return false
			}
		case p != xs[i] && unescapeSegment(p) != unescapeSegment(xs[i]):
			return false
		}
	}
	return len(xs) == len(ps)
}

// unescapeSegment is the path (or pattern) segment seg unescaped, as
// ServeMux matches it; seg itself when it has no escape or one that does not decode.
func unescapeSegment(seg string) string {
	if strings.IndexByte(seg, '%') < 0 {
		return seg
	}
	u, err := url.PathUnescape(seg)
	if err != nil {
		return seg
	}
	return u
}

// original returns the escaped path of r as the client sent it
// (r.RequestURI), before any http.StripPrefix, and its target (the path and,
// when not empty, "?" and the query); r.URL's when r has no RequestURI (a
// request built in a test) or one that does not parse. cur is r.URL's path
// escaped as sent (escapedPath), which the caller has already.
//
// RequestURI describes r.URL while the URL's path is its path, or what
// http.StripPrefix left of it (a suffix), and the query is its query
// (StripPrefix never changes it). Where it does not, the URL was changed
// after the server parsed the request, and the request is named by its own
// URL, as the handler sees it. A request a handler derived from the one it
// serves (r.Clone) and sends elsewhere in-process keeps the client's
// RequestURI, and must not take the client's identity: two requests it
// sends to two resources would share one record, and one it sends from two
// routes would get two. A middleware in front of the placement that
// rewrites the path cannot be told from that: its request is named by the
// path it leaves (docs/http.md says to keep in the identity what such a
// rewrite moves out of the path).
func original(r *http.Request, cur string) (path, target string) {
	uri := r.RequestURI
	if uri == "" {
		return cur, withQuery(cur, r.URL.RawQuery)
	}
	var query string
	if p, ok := plainPath(uri); ok {
		// What url.ParseRequestURI would give, without parsing; the
		// target is RequestURI itself (no string built per request).
		path, target = p, p
		if len(p) < len(uri) {
			if query = uri[len(p)+1:]; query != "" {
				target = uri
			}
		}
	} else if u, err := url.ParseRequestURI(uri); err == nil {
		path, query = escapedPath(u), u.RawQuery
		target = withQuery(path, query)
	} else {
		return cur, withQuery(cur, r.URL.RawQuery)
	}
	if !strings.HasSuffix(path, cur) || query != r.URL.RawQuery {
		return cur, withQuery(cur, r.URL.RawQuery)
	}
	return path, target
}

// escapedPath is u's path escaped as the client sent it: its escapes as
// written, and each byte that may not appear raw in a path (a space, '{',
// '|', a byte of UTF-8...) escaped on its own. url.URL.EscapedPath is not
// that: when the raw path holds such a byte it escapes the decoded path
// instead, and "/a%2Fb/{x}" comes back as "/a/b/%7Bx%7D", the spelling of
// another resource. A RawPath counts only while it spells u.Path, as
// url.URL itself has it: code that sets URL.Path leaves the old one
// behind.
func escapedPath(u *url.URL) string {
	if u.RawPath == "" {
		// The path as sent is EscapedPath's own spelling of it (url.URL
		// keeps a RawPath whenever the two differ).
		return u.EscapedPath()
	}
	if p, err := url.PathUnescape(u.RawPath); err != nil || p != u.Path {
		return u.EscapedPath() // stale
	}
	return escapeRaw(u.RawPath)
}

func withQuery(path, query string) string {
	if query == "" {
		return path
	}
	return path + "?" + query
}

// plainPath returns the path of a request target in origin form whose path
// url.URL.EscapedPath gives back as it is (letters, digits and the
// characters it never escapes in a path) and which has no control byte;
// ok is false for any other target, which is then parsed.
func plainPath(uri string) (path string, ok bool) {
	if uri[0] != '/' {
		return "", false
	}
	end := len(uri)
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if c < 0x20 || c == 0x7f {
			return "", false
		}
		if i < end {
			switch {
			case c == '?':
				end = i
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			case strings.IndexByte("-_.~$&+,/:;=@", c) >= 0:
			default:
				return "", false
			}
		}
	}
	return uri[:end], true
}

// parseKey reads the key from a header field: an sf-string (RFC 8941
// section 3.3.3) or bare visible ASCII without commas.
func parseKey(field string) (string, error) {
	// Only HTTP's optional white space (RFC 9110 section 5.6.3: space
	// and horizontal tab) is trimmed: strings.TrimSpace also took
	// Unicode spaces (U+00A0, U+0085, U+3000), so a bad key with one
	// before or after it was read as another, valid key (review r53).
	field = strings.Trim(field, " \t")
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
