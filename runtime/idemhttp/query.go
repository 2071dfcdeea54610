package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/internal/rawvalue"
	"github.com/idemkit/idem/runtime"
)

// StoredRequest is what is stored of a request on a route with a [Query]:
// its method, its target (path and query) as the client sent it, its body,
// and the scope the handler saw.
type StoredRequest struct {
	Method string
	Target string
	Body   []byte
	// Scope is the request's scope as the handler saw it (the [Scope]
	// option's, or the request context's runtime.ScopeFrom), whole: a
	// scope over 255 bytes too, whose record is named by a digest of it.
	// The query's context carries the same scope (runtime.ScopeFrom).
	Scope string
}

// QueryFunc answers "did the request happen?" for a route: the response
// to record (with runtime.OutcomeSucceeded), runtime.OutcomeFailed with the
// failure (answered as problem "failed"), runtime.OutcomeNotHappened, or
// runtime.OutcomeUnknown. ctx carries the attempt (runtime.FencingToken,
// runtime.DownstreamKeyFrom) as it does for the handler, and the scope the
// handler saw (runtime.ScopeFrom, also req.Scope), whether the query runs
// inline for a duplicate, in a reconciler or for a resolve. An error beside
// any outcome but runtime.OutcomeFailed means the query could not tell
// (see runtime.QueryFunc): the record stays UNKNOWN.
type QueryFunc func(ctx context.Context, req StoredRequest) (Response, runtime.Outcome, error)

// Query registers q as the "did it happen?" query of the route whose
// operation is operation ("POST /charges/{id}", the method and the pattern
// as the client sees the route, prefix included: see the package
// documentation), as runtime.Register does for runtime.Do. A duplicate that
// finds the request's record UNKNOWN (the handler answered 504, say), or
// taken over from a worker that died, asks q instead of answering
// outcome-unknown, and a reconciler on the runtime converges the route's
// records with it. The middleware then stores each request's target and
// body with its record (only on routes with a query), so the body counts
// against the store's record limit (413 beyond it). A nil q removes the
// route's query.
func Query(operation string, q QueryFunc, opts runtime.QueryOptions) Option {
	return func(c *config) {
		if c.rawQueries == nil {
			c.rawQueries, c.queryOpts = map[string]QueryFunc{}, map[string]runtime.QueryOptions{}
		}
		if q == nil || operation == "" {
			delete(c.rawQueries, operation)
			return
		}
		c.rawQueries[operation], c.queryOpts[operation] = q, opts
	}
}

func (cfg *config) query(q QueryFunc) runtime.QueryFunc[request, Response] {
	return func(ctx context.Context, rq request) (Response, runtime.Outcome, error) {
		if rq.URL == "" {
			return Response{}, runtime.OutcomeUnknown, errors.New("idemhttp: the request was not stored (the query was registered after it)")
		}
		scope := idname.QueryScope(ctx, idname.StoredScope(rq.Scope, rq.ScopeBytes))
		resp, o, err := q(runtime.WithScope(ctx, scope), StoredRequest{Method: rq.Method, Target: rq.URL, Body: rq.Body, Scope: scope})
		if o == runtime.OutcomeSucceeded {
			if resp.Status < 200 || resp.Status > 999 {
				return Response{}, runtime.OutcomeUnknown, fmt.Errorf("idemhttp: the query answered status %d", resp.Status)
			}
			h := http.Header{}
			for k, vs := range resp.Header {
				if k = http.CanonicalHeaderKey(k); cfg.stored(k) {
					h[k] = vs
				}
			}
			resp.Header = storedHeader(h)
		}
		return resp, o, err
	}
}

// unmarshalAny reads a Response in any form UnmarshalJSON accepts.
func (r *Response) unmarshalAny(b []byte) error {
	var raw struct {
		Status    *int                       `json:"status"`
		Header    map[string]json.RawMessage `json:"header"`
		Headers   map[string]json.RawMessage `json:"headers"`
		Body      json.RawMessage            `json:"body"`
		BodyText  *string                    `json:"body_text"`
		Streamed  bool                       `json:"streamed"`
		Truncated bool                       `json:"truncated"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return &recordError{err}
	}
	// A final status: net/http sends a 1xx as an informational response,
	// then 200 (101: a protocol switch), never as the answer (review r57).
	if raw.Status == nil || *raw.Status < 200 || *raw.Status > 999 {
		return &recordError{errors.New(`"status" must be a final HTTP status, 200 to 999`)}
	}
	*r = Response{Status: *raw.Status, Streamed: raw.Streamed, Truncated: raw.Truncated}
	if raw.Header != nil || raw.Headers != nil {
		r.Header = http.Header{}
	}
	for _, hs := range []map[string]json.RawMessage{raw.Header, raw.Headers} {
		// In the names' order, as the stored form has them (encoding/json
		// sorts map keys), so that two names of one header ("X-Id" and
		// "x-id") merge their values in one order on every replay.
		for _, k := range slices.Sorted(maps.Keys(hs)) {
			v := hs[k]
			var one string
			var many []string
			ck := http.CanonicalHeaderKey(k)
			if ck == "Content-Length" || ck == "Transfer-Encoding" {
				// Framing is net/http's, for the body replayed: a length
				// the body does not have, or an encoding it is not in,
				// would break the response (review r57). The middleware
				// stores neither.
				continue
			}
			switch {
			case string(bytes.TrimSpace(v)) == "null":
				// Suppressed the net/http way (Header()["Content-Type"] =
				// nil): present, with no value.
				if _, ok := r.Header[ck]; !ok {
					r.Header[ck] = nil
				}
			case json.Unmarshal(v, &one) == nil:
				r.Header[ck] = append(r.Header[ck], rawvalue.Decode(one))
			case json.Unmarshal(v, &many) == nil:
				for _, m := range many {
					r.Header[ck] = append(r.Header[ck], rawvalue.Decode(m))
				}
				if r.Header[ck] == nil {
					r.Header[ck] = nil // [] too: present, with no value
				}
			default:
				return &recordError{fmt.Errorf("header %q must be a string or a list of strings", k)}
			}
		}
	}
	body := bytes.TrimSpace(raw.Body)
	switch {
	case raw.BodyText != nil && len(body) > 0 && string(body) != "null":
		return &recordError{errors.New(`give "body" or "body_text", not both`)}
	case raw.BodyText != nil:
		r.Body = []byte(*raw.BodyText)
	case len(body) == 0 || string(body) == "null":
	case body[0] == '"':
		if err := json.Unmarshal(body, &r.Body); err != nil {
			return &recordError{fmt.Errorf(`"body" as a string is the body in base64: %w`, err)}
		}
	default:
		var c bytes.Buffer
		if err := json.Compact(&c, body); err != nil {
			return &recordError{err}
		}
		r.Body = c.Bytes()
	}
	return nil
}

// recordError is a stored record the middleware cannot read: a record
// resolved by hand in a wrong form, most likely.
type recordError struct{ err error }

func (e *recordError) Error() string {
	return "idemhttp: the stored record cannot be read: " + e.err.Error()
}
func (e *recordError) Unwrap() error { return e.err }
