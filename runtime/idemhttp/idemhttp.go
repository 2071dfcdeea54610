// Package idemhttp makes HTTP handlers idempotent with the Idempotency-Key
// header, on the idem runtime.
//
//	h := idemhttp.Middleware(rt,
//		idemhttp.Scope(func(r *http.Request) string { return tenantOf(r) }),
//	)(mux)
//
// A request with the header runs the handler at most once per (scope,
// operation, key); its response (status, headers, body) is stored and
// replayed to duplicates with the header "Idempotent-Replayed: true". A
// duplicate of a request still in flight waits up to the runtime's MaxWait,
// then gets 409 with Retry-After. The same key with another request (method,
// path, query or body) gets 422. A missing key gets 400 when required.
//
// Responses with status 5xx, 408 and 429 release the key by default, so the
// client's retry runs the handler again: a handler whose remote effect may
// have happened before it failed should run that effect through
// runtime.Do itself, so that its outcome is UNKNOWN rather than retried.
// A panicking handler leaves the key UNKNOWN (409 to duplicates).
package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemkit/idem/runtime"
)

// DefaultHeader is the request header carrying the key (IETF draft
// "The Idempotency-Key HTTP Header Field").
const DefaultHeader = "Idempotency-Key"

// ReplayedHeader is set to "true" on responses replayed from a record.
const ReplayedHeader = "Idempotent-Replayed"

// Option configures the middleware.
type Option func(*config)

type config struct {
	header    string
	required  bool
	scope     func(*http.Request) string
	operation func(*http.Request) string
	maxBody   int64
	retryable func(status int) bool
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
// method and the route pattern (or path), "POST /charges".
func Operation(f func(*http.Request) string) Option { return func(c *config) { c.operation = f } }

// MaxBody limits the request body read for the fingerprint (default 1 MiB);
// larger requests get 413.
func MaxBody(n int64) Option { return func(c *config) { c.maxBody = n } }

// RetryableStatus sets which response statuses release the key so that a
// retry runs the handler again (default: 5xx, 408, 429).
func RetryableStatus(f func(status int) bool) Option { return func(c *config) { c.retryable = f } }

// Request is what the fingerprint covers.
type request struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	Body   []byte `json:"body"`
}

// Response is a recorded HTTP response.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// Middleware returns the idempotency middleware on rt.
func Middleware(rt *runtime.Runtime, opts ...Option) func(http.Handler) http.Handler {
	cfg := config{header: DefaultHeader, maxBody: 1 << 20, retryable: func(s int) bool {
		return s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests
	}}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			serve(rt, &cfg, next, w, r)
		})
	}
}

func safeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

func serve(rt *runtime.Runtime, cfg *config, next http.Handler, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(cfg.header)
	if key == "" || safeMethod(r.Method) {
		if key == "" && cfg.required && !safeMethod(r.Method) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("the %s header is required", cfg.header), 0)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, cfg.maxBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error(), 0)
		return
	}
	if int64(len(body)) > cfg.maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", cfg.maxBody), 0)
		return
	}
	ctx := r.Context()
	if cfg.scope != nil {
		ctx = runtime.WithScope(ctx, cfg.scope(r))
	}
	op := r.Method + " " + r.URL.Path
	if r.Pattern != "" {
		op = r.Pattern
	}
	if cfg.operation != nil {
		op = cfg.operation(r)
	}
	ran := false
	resp, err := runtime.Do(ctx, rt, runtime.Call[request, Response]{
		Operation: op, Key: key,
		Request: request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body},
		Effect: func(ctx context.Context, _ request) (Response, error) {
			ran = true
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			r2 := r.WithContext(ctx)
			r2.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(rec, r2)
			resp := Response{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
			if cfg.retryable(resp.Status) {
				return resp, runtime.Retryable(&statusError{resp})
			}
			return resp, nil
		},
	})
	var se *statusError
	switch {
	case err == nil:
		if !ran {
			w.Header().Set(ReplayedHeader, "true")
		}
		writeResponse(w, resp)
	case errors.As(err, &se):
		writeResponse(w, se.resp) // released: the client may retry
	case errors.Is(err, runtime.ErrInvalidKey):
		writeError(w, http.StatusBadRequest, err.Error(), 0)
	case errors.Is(err, runtime.ErrKeyReused):
		writeError(w, http.StatusUnprocessableEntity, err.Error(), 0)
	case errors.Is(err, runtime.ErrInProgress), errors.Is(err, runtime.ErrOutcomeUnknown):
		writeError(w, http.StatusConflict, err.Error(), 1)
	case errors.Is(err, runtime.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error(), 0)
	default:
		writeError(w, http.StatusInternalServerError, err.Error(), 0)
	}
}

type statusError struct{ resp Response }

func (e *statusError) Error() string { return "handler answered " + strconv.Itoa(e.resp.Status) }

func writeResponse(w http.ResponseWriter, resp Response) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

func writeError(w http.ResponseWriter, status int, msg string, retryAfter int) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// recorder captures a handler's response.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = status, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}
