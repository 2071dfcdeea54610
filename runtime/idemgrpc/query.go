package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/errtree"
)

// QueryFunc answers "did the call with this request happen?" for a method:
// the response (with runtime.OutcomeSucceeded), runtime.OutcomeFailed with
// the failure (a status error is replayed as that status),
// runtime.OutcomeNotHappened, or runtime.OutcomeUnknown. ctx carries the
// attempt (runtime.FencingToken, runtime.DownstreamKeyFrom) as it does for
// the handler, and the scope the handler saw (runtime.ScopeFrom), whole,
// whether the query runs inline for a duplicate, in a reconciler or for a
// resolve. [QueryCall] takes a query that is handed the scope explicitly.
// An error beside any outcome but runtime.OutcomeFailed means the query
// could not tell (see runtime.QueryFunc): the record stays UNKNOWN.
type QueryFunc func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error)

// StoredCall is what a method's query is asked about: the call's method
// and request message, and the scope the handler saw, whole (a scope over
// 255 bytes too, whose record is named by a digest of it).
type StoredCall struct {
	Method  string
	Request proto.Message
	Scope   string
}

// CallQueryFunc is a [QueryFunc] handed the call explicitly, scope
// included; its context carries the same scope (runtime.ScopeFrom).
type CallQueryFunc func(ctx context.Context, call StoredCall) (proto.Message, runtime.Outcome, error)

// Query registers q as fullMethod's "did it happen?" query, as
// runtime.Register does for runtime.Do: a duplicate that finds the call's
// record UNKNOWN, or taken over from a worker that died, asks q instead of
// answering OUTCOME_UNKNOWN, and a reconciler on the runtime converges the
// method's records with it. The interceptor then stores each call's request
// message with the record (only for methods with a query), and the request
// counts against the store's record limit (REQUEST_TOO_LARGE beyond it).
// A nil q removes the method's query from the interceptor.
func Query(fullMethod string, q QueryFunc, opts runtime.QueryOptions) Option {
	if q == nil {
		return QueryCall(fullMethod, nil, opts)
	}
	return QueryCall(fullMethod, func(ctx context.Context, c StoredCall) (proto.Message, runtime.Outcome, error) {
		return q(ctx, c.Request)
	}, opts)
}

// QueryCall is [Query] with a query handed the call's scope explicitly
// (StoredCall.Scope), so that a tenant-scoped lookup never depends on the
// context to find its tenant.
func QueryCall(fullMethod string, q CallQueryFunc, opts runtime.QueryOptions) Option {
	return func(c *config) {
		if c.rawQueries == nil {
			c.rawQueries, c.queryOpts = map[string]CallQueryFunc{}, map[string]runtime.QueryOptions{}
		}
		if q == nil {
			delete(c.rawQueries, fullMethod)
			return
		}
		c.rawQueries[fullMethod], c.queryOpts[fullMethod] = q, opts
	}
}

// query adapts q to the runtime's form: the stored request message is
// decoded by its type, and the answer is recorded as the handler's would be.
func (cfg *config) query(q CallQueryFunc) runtime.QueryFunc[request, record] {
	return func(ctx context.Context, rq request) (record, runtime.Outcome, error) {
		if rq.Type == "" {
			return record{}, runtime.OutcomeUnknown, errors.New("idemgrpc: the request was not stored (the query was registered after the call)")
		}
		mt, err := cfg.resolver.FindMessageByName(protoreflect.FullName(rq.Type))
		if err != nil {
			return record{}, runtime.OutcomeUnknown, fmt.Errorf("idemgrpc: the stored request's type: %w", err)
		}
		m := mt.New().Interface()
		if err := proto.Unmarshal(rq.Message, m); err != nil {
			return record{}, runtime.OutcomeUnknown, fmt.Errorf("idemgrpc: decoding the stored request: %w", err)
		}
		scope := idname.QueryScope(ctx, idname.StoredScope(rq.Scope, rq.ScopeBytes))
		ctx = runtime.WithScope(ctx, scope)
		resp, o, qerr := q(ctx, StoredCall{Method: rq.Method, Request: m, Scope: scope})
		switch {
		case qerr != nil && o != runtime.OutcomeFailed:
			return record{}, runtime.OutcomeUnknown, qerr // could not tell (see runtime.QueryFunc)
		case o == runtime.OutcomeSucceeded:
			rec, err := cfg.outcome(ctx, resp, nil)
			if err != nil {
				return record{}, runtime.OutcomeUnknown, err
			}
			return rec, o, nil
		case o == runtime.OutcomeFailed:
			if qerr == nil {
				qerr = errors.New("failed")
			}
			// Flattened first, as the runtime flattens what the query
			// returns (status.FromError's errors.As would loop on a cycle,
			// and read a shared subtree once per path).
			qerr = errtree.Acyclic(qerr)
			if st, ok := status.FromError(qerr); ok {
				return record{}, o, &statusFailure{st}
			}
			return record{}, o, qerr
		}
		return record{}, o, qerr
	}
}

// protojson returns the options reading a response resolved by hand.
func (cfg *config) protojson() protojson.UnmarshalOptions {
	if r, ok := cfg.resolver.(interface {
		protoregistry.ExtensionTypeResolver
		protoregistry.MessageTypeResolver
	}); ok {
		return protojson.UnmarshalOptions{Resolver: r}
	}
	return protojson.UnmarshalOptions{}
}

// NeverStoredMetadata returns the header metadata keys that are never
// stored nor replayed, whatever the options: credentials and per-client
// state (authorization, cookie and set-cookie, their proxy forms and
// challenges), gRPC's own keys (grpc-*, content-type, te, user-agent) and
// the replay marker. Keys starting with ":" (pseudo-headers) are never
// stored either.
func NeverStoredMetadata() []string {
	return []string{
		"authorization", "proxy-authorization", "authentication-info", "proxy-authentication-info",
		"www-authenticate", "proxy-authenticate", "cookie", "set-cookie", "set-cookie2",
		"content-type", "te", "user-agent", ReplayedMetadata,
	}
}

// DropMetadata adds header metadata keys that are never stored nor
// replayed, to [NeverStoredMetadata]. The first caller still gets them.
func DropMetadata(keys ...string) Option {
	return func(c *config) {
		for _, k := range keys {
			c.drop[strings.ToLower(k)] = true
		}
	}
}

// storedHeader is what is kept of header metadata: no credentials, no
// gRPC or pseudo keys.
func (cfg *config) storedHeader(md map[string][]string) metadata.MD {
	out := metadata.MD{}
	for k, vs := range md {
		k = strings.ToLower(k)
		if k == "" || cfg.drop[k] || strings.HasPrefix(k, "grpc-") || strings.HasPrefix(k, ":") || len(vs) == 0 {
			continue
		}
		out[k] = append(out[k], vs...)
	}
	return out
}

// headerStream records the header metadata a handler sets (grpc.SetHeader,
// grpc.SendHeader), passing it on.
type headerStream struct {
	grpc.ServerTransportStream
	mu sync.Mutex
	md metadata.MD
}

func (s *headerStream) SetHeader(md metadata.MD) error {
	if err := s.ServerTransportStream.SetHeader(md); err != nil {
		return err
	}
	s.add(md)
	return nil
}

func (s *headerStream) SendHeader(md metadata.MD) error {
	if err := s.ServerTransportStream.SendHeader(md); err != nil {
		return err
	}
	s.add(md)
	return nil
}

func (s *headerStream) add(md metadata.MD) {
	s.mu.Lock()
	s.md = metadata.Join(s.md, md)
	s.mu.Unlock()
}

func (s *headerStream) header() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.md.Copy()
}
