// Package idemgrpc makes unary gRPC methods idempotent on the idem runtime,
// with the semantics of runtime/idemhttp: a server interceptor that runs a
// handler at most once per (scope, method, key) and replays its stored
// response, and a client interceptor that attaches a key generated once per
// logical call and reused on every retry of it.
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Scope(principalOf)),
//	))
//	conn, err := grpc.NewClient(target, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
//
// Server side: the key is the one value of the "idempotency-key" metadata
// (see [Metadata]); the operation is the full method name; the scope is
// replaced by a fixed-size digest when it is over 255 bytes (a long SPIFFE
// ID) or contains the digests' marker "…#sha256:", so that two scopes never
// share a name; the fingerprint is the SHA-256 of the method and the deterministic
// proto encoding of the request (only digests are stored, unless the method
// has a [Query]). The handler's response message is stored (its full name
// and deterministic encoding) with the header metadata it set (less
// [NeverStoredMetadata]) and replayed, with the header metadata
// "idempotent-replayed: true". A handler's error is classified in this
// order:
//
//   - an error that leaves the outcome unknown (a timeout or a cancellation
//     anywhere in the error's tree, or a DeadlineExceeded or Canceled
//     status: runtime.Uncertain) is handed to the runtime as it is and
//     records UNKNOWN, whatever its code and the error policy (register a
//     [Query] or a runtime.NoQueryPolicy to converge it);
//   - an error the handler marked runtime.Permanent or runtime.Retryable
//     (the first mark in its tree decides; an unmarked error matching
//     runtime.ErrPermanent counts as Permanent: runtime.Marked) follows its
//     mark, whatever its code: Permanent stores it as a permanent failure
//     (a status with its code and details), Retryable releases the key;
//   - a plain error (no status: grpc sends it as Unknown), and an Unknown or
//     Internal status, are no code the handler chose: they are handed to the
//     runtime as they are, which honours runtime.Retryable and
//     runtime.Permanent and otherwise applies its error policy, UNKNOWN by
//     default (an Unknown or Internal status listed in [RetryableCodes] is
//     released instead);
//   - a retryable code ([RetryableCodes]: Unavailable, ResourceExhausted,
//     Aborted by default) returned after the call's context ended (its
//     deadline passed, it was cancelled, or the lease was lost) records
//     UNKNOWN, whatever the error policy, as a 5xx does in idemhttp: the
//     handler gave up waiting on something that may have acted;
//   - another retryable code releases the key;
//   - any other status is stored as a permanent failure (FAILED, the status
//     with its details as the failure's detail) and replayed; a status too
//     large for the store loses its details and then part of its message,
//     never its code.
//
// A panicking handler releases the key and the panic is re-raised (put a
// recovering interceptor before this one: grpc-go does not recover panics).
//
// The interceptor's own errors carry an errdetails.ErrorInfo (domain
// [Domain], reason one of the Reason constants) and, when a retry may
// succeed, an errdetails.RetryInfo and the grpc-retry-pushback-ms trailer
// that grpc-go's retry policy honours; their messages name no key, method
// or internal error:
//
//	missing, repeated or invalid key  InvalidArgument     KEY_MISSING, KEY_INVALID
//	key reused with another request   FailedPrecondition  KEY_REUSED
//	call with the key in flight       Aborted + retry     IN_PROGRESS (after the runtime's MaxWait)
//	outcome unknown, reconciling      Aborted + retry     OUTCOME_UNKNOWN
//	failed for good, no stored status FailedPrecondition  FAILED (or the stored code, if a gRPC code name)
//	succeeded, response not stored    AlreadyExists       RESPONSE_NOT_STORED (stable for the TTL)
//	request too large to store        ResourceExhausted   REQUEST_TOO_LARGE (methods with a Query)
//	stored outcome unreadable         Internal            RECORD_UNREADABLE
//	the caller's deadline or cancel   DeadlineExceeded, Canceled (nothing logged)
//	store outage                      Unavailable + retry STORE_UNAVAILABLE
package idemgrpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/internal/rawvalue"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/errtree"
)

// DefaultMetadata is the metadata key carrying the idempotency key.
const DefaultMetadata = "idempotency-key"

// ReplayedMetadata is set to "true" in the header metadata of a replayed
// response.
const ReplayedMetadata = "idempotent-replayed"

// Domain is the ErrorInfo domain of the interceptor's errors.
const Domain = "idem.idemkit.github.io"

// Reasons of the ErrorInfo details.
const (
	ReasonKeyMissing        = "KEY_MISSING"
	ReasonKeyInvalid        = "KEY_INVALID"
	ReasonKeyReused         = "KEY_REUSED"
	ReasonInProgress        = "IN_PROGRESS"
	ReasonOutcomeUnknown    = "OUTCOME_UNKNOWN"
	ReasonResponseNotStored = "RESPONSE_NOT_STORED"
	ReasonStoreUnavailable  = "STORE_UNAVAILABLE"
	// ReasonFailed: the call with this key failed for good (a record
	// resolved as failed by hand or by a no-query policy, or a query's
	// answer) and no status was stored for it; the ErrorInfo's metadata
	// "code" carries the stored code, if any.
	ReasonFailed = "FAILED"
	// ReasonRequestTooLarge: the request is too large for the store to
	// record (only a method with a [Query] stores its request).
	ReasonRequestTooLarge = "REQUEST_TOO_LARGE"
	// ReasonRecordUnreadable: the stored outcome cannot be read (a record
	// resolved by hand in a wrong form); the server logs why.
	ReasonRecordUnreadable = "RECORD_UNREADABLE"
)

// Option configures the server interceptor.
type Option func(*config)

type config struct {
	metadata  string
	required  bool
	scope     func(ctx context.Context) string
	methods   func(fullMethod string) bool
	retryable func(codes.Code) bool
	resolver  protoregistry.MessageTypeResolver
	logger    *slog.Logger
	drop      map[string]bool // header metadata keys never stored
	// rawQueries and queryOpts are the [Query] options by full method;
	// queries the same by operation, wrapped for runtime.Do.
	rawQueries map[string]CallQueryFunc
	queryOpts  map[string]runtime.QueryOptions
	queries    map[string]runtime.QueryFunc[request, record]
}

// Metadata sets the metadata key carrying the idempotency key.
func Metadata(key string) Option { return func(c *config) { c.metadata = strings.ToLower(key) } }

// Required makes calls of the covered methods without a key fail with
// InvalidArgument instead of running unprotected.
func Required(required bool) Option { return func(c *config) { c.required = required } }

// Scope sets how the scope (the authenticated principal or tenant) is found
// from the call's context; the default is runtime.ScopeFrom (an
// authentication interceptor may have set runtime.WithScope).
func Scope(f func(ctx context.Context) string) Option { return func(c *config) { c.scope = f } }

// Methods sets which methods the interceptor covers (default: all unary
// methods).
func Methods(f func(fullMethod string) bool) Option { return func(c *config) { c.methods = f } }

// RetryableCodes sets which status codes a handler returns release the key
// so that a retry runs the handler again (default: Unavailable,
// ResourceExhausted, Aborted: the codes gRPC defines as "retry"). Other
// codes are stored and replayed, except Unknown and Internal, which the
// runtime classifies (UNKNOWN under the default error policy) unless listed
// here. A plain error (not a status) is never a code: the runtime's error
// policy decides it, whatever is listed. An error that leaves the outcome
// unknown (runtime.Uncertain: DeadlineExceeded, Canceled, or a timeout
// wrapped in any code), and a listed code returned after the call's context
// ended, record UNKNOWN whatever the codes listed here.
func RetryableCodes(cs ...codes.Code) Option {
	return func(c *config) { c.retryable = func(code codes.Code) bool { return slices.Contains(cs, code) } }
}

// Resolver sets how a stored response's message type is found on replay
// (default protoregistry.GlobalTypes).
func Resolver(r protoregistry.MessageTypeResolver) Option { return func(c *config) { c.resolver = r } }

// Logger sets where the interceptor logs what it does not tell clients
// (store errors, recording failures, panics); default slog.Default().
func Logger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// request is what the fingerprint covers (Method, MessageSz, SHA256), and,
// for a method with a query, the message itself, for the query.
type request struct {
	Method    string `json:"method"`
	MessageSz int    `json:"message_len"`
	SHA256    string `json:"message_sha256"`
	// Type and Message are stored only for a method with a [Query].
	Type    string `json:"type,omitempty"`
	Message []byte `json:"message,omitempty"`
	// Scope is the scope the handler saw, stored for the query when the
	// identity's is a digest of it (over 255 bytes, or not valid UTF-8);
	// otherwise the identity's scope is the scope. ScopeBytes holds it
	// instead when it is not valid UTF-8 (JSON text would not keep it).
	Scope      string `json:"scope,omitempty"`
	ScopeBytes []byte `json:"scope_bytes,omitempty"`
}

// record is a stored success: a response message (Type and Message, or
// JSONMessage for a record resolved by hand in the documented JSON form),
// the header metadata the handler set, or neither when the response was not
// stored. Error statuses are stored as FAILED records (see statusFailure);
// Status is read for records written before that.
type record struct {
	Type    string              `json:"type,omitempty"`
	Message []byte              `json:"message,omitempty"`
	Status  []byte              `json:"status,omitempty"`
	Header  map[string][]string `json:"header,omitempty"`
	// JSONMessage is Message in protojson, as `idemctl resolve -to success`
	// writes it: {"type":"pkg.Reply","message":{...}}.
	JSONMessage json.RawMessage `json:"-"`
}

// UnmarshalJSON reads a record in its stored form or in the documented form
// for records resolved by hand, whose "message" is the response in protojson
// rather than its binary encoding in base64.
func (r *record) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type    string              `json:"type"`
		Message json.RawMessage     `json:"message"`
		Status  []byte              `json:"status"`
		Header  map[string][]string `json:"header"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return &recordError{err}
	}
	rawvalue.DecodeAll(raw.Header) // -bin metadata is stored in base64
	*r = record{Type: raw.Type, Status: raw.Status, Header: raw.Header}
	msg := bytes.TrimSpace(raw.Message)
	switch {
	case len(msg) == 0 || string(msg) == "null":
	case msg[0] == '"':
		if err := json.Unmarshal(msg, &r.Message); err != nil {
			return &recordError{fmt.Errorf("message: %w", err)}
		}
	case msg[0] == '{':
		r.JSONMessage = msg
	default:
		return &recordError{errors.New(`"message" must be the response in protojson (an object) or its binary encoding in base64 (a string)`)}
	}
	if (r.Message != nil || r.JSONMessage != nil) && r.Type == "" {
		return &recordError{errors.New(`a record with a "message" needs its "type", the message's full name`)}
	}
	return nil
}

// recordError is a stored record the interceptor cannot read: a record
// resolved by hand in a wrong form, most likely.
type recordError struct{ err error }

func (e *recordError) Error() string {
	return "idemgrpc: the stored record cannot be read: " + e.err.Error()
}
func (e *recordError) Unwrap() error { return e.err }

// UnaryServerInterceptor returns the server interceptor on rt. The queries
// set with [Query] are registered on rt (runtime.Register) for the
// reconciler.
func UnaryServerInterceptor(rt *runtime.Runtime, opts ...Option) grpc.UnaryServerInterceptor {
	cfg := &config{
		metadata: DefaultMetadata, methods: func(string) bool { return true },
		retryable: func(c codes.Code) bool {
			switch c {
			case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
				return true
			}
			return false
		},
		resolver: protoregistry.GlobalTypes, logger: slog.Default(),
		drop: map[string]bool{}, queries: map[string]runtime.QueryFunc[request, record]{},
	}
	for _, o := range opts {
		o(cfg)
	}
	for _, k := range NeverStoredMetadata() {
		cfg.drop[k] = true
	}
	for m, q := range cfg.rawQueries {
		rq := cfg.query(q)
		cfg.queries[operation(m)] = rq
		// Register fails only for an empty operation or a nil query, and
		// neither can be here.
		_ = runtime.Register(rt, operation(m), rq, cfg.queryOpts[m])
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return serve(ctx, rt, cfg, req, info, handler)
	}
}

func serve(ctx context.Context, rt *runtime.Runtime, cfg *config, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !cfg.methods(info.FullMethod) {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(cfg.metadata)
	switch {
	case len(vals) == 0 && cfg.required:
		return nil, errStatus(ctx, codes.InvalidArgument, ReasonKeyMissing, "this method needs an "+cfg.metadata+" metadata value", 0)
	case len(vals) == 0:
		return handler(ctx, req)
	case len(vals) > 1:
		return nil, errStatus(ctx, codes.InvalidArgument, ReasonKeyInvalid, fmt.Sprintf("the call has %d %s values; send exactly one", len(vals), cfg.metadata), 0)
	}
	key := vals[0]
	if runtime.ValidateKey(key) != nil {
		return nil, errStatus(ctx, codes.InvalidArgument, ReasonKeyInvalid, "the "+cfg.metadata+" metadata must be 1 to 255 bytes of visible ASCII", 0)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Error(codes.Internal, "idempotent method with a request that is not a proto message")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "the request cannot be encoded")
	}
	// The handler sees the scope as it is; the identity gets a fixed-size
	// name for a scope over 255 bytes (a long SPIFFE ID), which is the
	// server's business, not the client's error.
	handlerCtx := ctx
	if cfg.scope != nil {
		handlerCtx = runtime.WithScope(ctx, cfg.scope(ctx))
	}
	scope := runtime.ScopeFrom(handlerCtx)
	idScope := idname.Fit(scope, runtime.MaxKeyLen)
	if id, ok := rt.Running(ctx); ok && id == (runtime.Identity{Scope: idScope, Operation: operation(info.FullMethod), Key: key}) {
		// This call's own runtime call is running, its record in this
		// interceptor's store: the interceptor is chained twice. The outer
		// one holds the claim and records what the handler returns;
		// claiming again would wait on itself. (An outer interceptor on
		// another store claimed nothing here: this one claims.)
		return handler(handlerCtx, req)
	}
	op := operation(info.FullMethod)
	deferToInner(ctx, cfg, idScope, op, key)
	ctx = runtime.WithScope(handlerCtx, idScope)
	sum := sha256.Sum256(append([]byte(info.FullMethod+"\x00"), b...))
	rq := request{Method: info.FullMethod, MessageSz: len(b), SHA256: hex.EncodeToString(sum[:])}
	// The fingerprint covers the digests only, whether or not the message
	// is stored for a query.
	fpBytes, err := rt.Codec().Marshal(rq)
	if err != nil {
		return nil, status.Error(codes.Internal, "the request cannot be encoded")
	}
	query := cfg.queries[op]
	if query == nil {
		// The interceptor chained twice on this runtime: the inner one may
		// have the method's query, and the call that claims runs with it.
		query, _ = runtime.RegisteredQuery[request, record](rt, op)
	}
	if query != nil {
		rq.Type, rq.Message = string(msg.ProtoReflect().Descriptor().FullName()), b
		if idScope != scope {
			rq.Scope, rq.ScopeBytes = idname.StoreScope(scope)
		}
	}
	var (
		ran  bool
		out  any
		herr error
		pnc  *panicked
		hs   *headerStream
		// failure: the handler's answer is a failure the runtime records
		// as FAILED.
		failure bool
		outer   = outerCall{cfg: cfg, op: op, key: key, idScope: idScope} // see deferToInner
	)
	rec, err := runtime.Do(ctx, rt, runtime.Call[request, record]{
		Operation:   op,
		Key:         key,
		Request:     rq,
		Fingerprint: runtime.Fingerprint(fpBytes),
		Query:       query,
		Effect: func(ectx context.Context, _ request) (record, error) {
			ran, outer.ectx = true, ectx
			ectx = runtime.WithScope(ectx, scope)
			ectx = context.WithValue(ectx, outerKey{}, &outer)
			if ts := grpc.ServerTransportStreamFromContext(ectx); ts != nil {
				hs = &headerStream{ServerTransportStream: ts}
				ectx = grpc.NewContextWithServerTransportStream(ectx, hs)
			}
			out, pnc, herr = callRecovering(ectx, handler, req)
			if pnc != nil {
				return record{}, runtime.Retryable(handlerPanicked{})
			}
			if outer.deferred.Load() {
				return record{}, runtime.Retryable(errDeferred)
			}
			rec, err := cfg.outcome(ectx, out, herr)
			failure = err != nil && recordsFailed(rt, err)
			if err == nil && hs != nil {
				rec.Header = rawvalue.Encode(cfg.storedHeader(hs.header()))
			}
			return rec, err
		},
	})
	if ran { // this call ran the handler: its caller gets what it returned
		if pnc != nil {
			cfg.logger.ErrorContext(ctx, "idemgrpc: handler panicked; the key was released and the panic re-raised",
				"method", info.FullMethod, "panic", fmt.Sprint(pnc.value), "stack", string(pnc.stack))
			panic(pnc.value)
		}
		if failure && !errtree.SafeIs(err, runtime.ErrPermanent) {
			// The handler's failure was not recorded (the store failed
			// until the completion timeout, or another worker took the
			// call over): a duplicate may still run the handler, so the
			// failure is not the call's answer. The caller retries.
			return nil, cfg.answer(ctx, info.FullMethod, err)
		}
		if err != nil && herr == nil && !errtree.SafeIs(err, errDeferred) { // an inner interceptor's call is released by design
			cfg.logger.WarnContext(ctx, "idemgrpc: the handler answered but its outcome was not recorded", "method", info.FullMethod, "err", err)
		}
		return out, herr
	}
	if err == nil {
		return cfg.replay(ctx, info.FullMethod, rec)
	}
	if errtree.SafeIs(err, runtime.ErrNotRecorded) && rec.Type != "" {
		// The method's query found the call done, and the store could not
		// record it: its response is the answer (the runtime's
		// ErrNotRecorded), as a caller whose handler ran gets its own.
		cfg.logger.WarnContext(ctx, "idemgrpc: the query found the call done but its outcome was not recorded", "method", info.FullMethod, "err", err)
		return cfg.replay(ctx, info.FullMethod, rec)
	}
	return nil, cfg.answer(ctx, info.FullMethod, err)
}

// answer maps an error of runtime.Do for a call that did not run the
// handler to the status its caller gets. Every error Do returns has its
// answer (see the table in docs/http.md); only what is left is a store
// outage.
func (cfg *config) answer(ctx context.Context, fullMethod string, err error) error {
	var (
		fe *runtime.FailedError
		re *recordError
	)
	var syn *json.SyntaxError
	switch {
	case errtree.SafeAs(err, &re), errtree.SafeAs(err, &syn):
		// A stored record that is not one JSON value (resolved by hand
		// through runtime.Resolve) fails before the record's own reader
		// runs: unreadable too (review r57).
		// Before ErrNotReplayable, which the runtime wraps around a stored
		// response it cannot decode: a record of this interceptor's that
		// it cannot read (one resolved by hand in a wrong form) is not a
		// response left unstored.
		return unreadable(ctx, cfg.logger, fullMethod, err)
	case errtree.SafeIs(err, runtime.ErrNotReplayable):
		return notStored(ctx)
	case errtree.SafeIs(err, runtime.ErrInvalidKey):
		return errStatus(ctx, codes.InvalidArgument, ReasonKeyInvalid, "the idempotency key is not valid", 0)
	case errtree.SafeIs(err, runtime.ErrKeyReused):
		return errStatus(ctx, codes.FailedPrecondition, ReasonKeyReused, "this idempotency key was used with another request", 0)
	case errtree.SafeIs(err, runtime.ErrInProgress), errtree.SafeIs(err, runtime.ErrLeaseLost):
		// ErrLeaseLost: another worker took the call over while this one
		// asked the query; it is in progress there.
		return errStatus(ctx, codes.Aborted, ReasonInProgress, "a call with this idempotency key is still in progress; retry later", time.Second)
	case errtree.SafeIs(err, runtime.ErrOutcomeUnknown):
		return errStatus(ctx, codes.Aborted, ReasonOutcomeUnknown, "an earlier call with this idempotency key may or may not have taken effect; it is being reconciled", 5*time.Second)
	case errtree.SafeAs(err, &fe):
		return cfg.failed(ctx, fe)
	case errtree.SafeIs(err, runtime.ErrPermanent):
		return cfg.failed(ctx, &runtime.FailedError{Message: "the call with this idempotency key failed"})
	case errtree.SafeIs(err, runtime.ErrTooLarge):
		return errStatus(ctx, codes.ResourceExhausted, ReasonRequestTooLarge, "the request is too large to record", 0)
	case errtree.SafeIs(context.Cause(ctx), runtime.ErrLeaseLost):
		// An interceptor chained around this one (on another store) could
		// not confirm its lease and stopped its handler, this call's wait
		// or claim with it: the caller did not cancel, and the call is in
		// progress there.
		return errStatus(ctx, codes.Aborted, ReasonInProgress, "a call with this idempotency key is still in progress; retry later", time.Second)
	case ctx.Err() != nil:
		// The caller's own deadline passed, or it cancelled, while the
		// runtime waited or read: its own status, and nothing to log.
		cfg.logger.DebugContext(ctx, "idemgrpc: the call ended before its outcome was known", "method", fullMethod, "err", err)
		return callerStatus(ctx)
	}
	cfg.logger.ErrorContext(ctx, "idemgrpc: the idempotency store failed; answered Unavailable", "method", fullMethod, "err", err)
	return errStatus(ctx, codes.Unavailable, ReasonStoreUnavailable, "the idempotency store is unavailable; retry later", 2*time.Second)
}

// outerKey is the context key under which a running call of the
// interceptor is known to an interceptor chained inside it (the value is
// its *outerCall; see deferToInner).
type outerKey struct{}

// outerCall is what an interceptor running a call tells those chained
// inside it: how it names the call (its operation and idempotency key), and
// whether an inner one claimed that very call in a store of its own.
type outerCall struct {
	cfg              *config // the interceptor's
	op, key, idScope string
	ectx             context.Context // the outer call's effect context
	deferred         atomic.Bool
}

// deferToInner tells the interceptor chained outside this one, if any and
// if it is running the call, that this one claims the call in another
// store (a per-process interceptor around one on the method's shared
// store): the outer one then records nothing for the call and releases its
// key, whatever the handler returns. The inner one's record is the call's
// (its reconciler converges it; its in-progress and outcome-unknown
// answers are not final): recorded in the outer store too, an answer would
// be replayed there long after it stopped being true.
//
// Only for the outer one's own call, which the inner interceptor names as
// the outer one does: the same method and the same idempotency key. A call
// the handler makes itself (in-process, to another method, on the call's
// context) is not the outer one's, and its claim leaves the outer record
// alone, even with the same message; an interceptor between the two that
// hands on a copy of the message still hands on the outer one's call. The
// same interceptor re-entered in-process (its scope function is the outer
// one's) compares the scope too: in another scope the call is another
// (two interceptors may scope a call differently, an option on one of
// them only).
func deferToInner(ctx context.Context, cfg *config, idScope, op, key string) {
	o, ok := ctx.Value(outerKey{}).(*outerCall)
	if !ok || o.op != op || o.key != key || (o.cfg == cfg && o.idScope != idScope) {
		return
	}
	o.deferred.Store(true)
	// Should the handler leave without returning (runtime.Goexit), the
	// outer call releases its claim as it would on return.
	runtime.ReleaseOnLeave(o.ectx)
}

// errDeferred releases the key of a call an inner interceptor claimed in
// its own store (see deferToInner).
var errDeferred = errors.New("idemgrpc: an interceptor chained inside this one, on another store, holds the call's record")

// deadlineSlack is how close to its deadline a cancelled call counts as
// past it: a client's expired deadline reaches the server as a
// cancellation (RST_STREAM), which can come before the server's own copy of
// the deadline, set when the call arrived, passes.
const deadlineSlack = 100 * time.Millisecond

// callerStatus is the status of a call whose context ended: DeadlineExceeded
// when its deadline has passed or is within deadlineSlack, Canceled
// otherwise.
func callerStatus(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < deadlineSlack {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed while it waited for the call in flight with its idempotency key")
	}
	return status.Error(codes.Canceled, "the call was canceled while it waited for the call in flight with its idempotency key")
}

// failed answers a call whose record is FAILED: the stored status when
// there is one, else the stored code when it is a gRPC code name, else
// FailedPrecondition with reason FAILED and the stored code in the
// ErrorInfo's metadata.
func (cfg *config) failed(ctx context.Context, fe *runtime.FailedError) error {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedMetadata, "true"))
	if d := fe.Detail; len(d) > 0 {
		sp := &spb.Status{}
		if err := proto.Unmarshal(d, sp); err == nil && sp.GetCode() != int32(codes.OK) {
			return status.ErrorProto(sp)
		}
	}
	if c, ok := parseCode(fe.Code); ok {
		return status.Error(c, fe.Message)
	}
	msg := fe.Message
	if msg == "" && fe.Code == "" {
		// The size rule kept nothing of it (a store's tiny record limit).
		msg = "the first call with this idempotency key failed; its status was not stored (over the store's record limit)"
	}
	st := status.New(codes.FailedPrecondition, msg)
	info := &errdetails.ErrorInfo{Reason: ReasonFailed, Domain: Domain}
	if fe.Code != "" {
		info.Metadata = map[string]string{"code": fe.Code}
	}
	if withDetails, err := st.WithDetails(info); err == nil {
		st = withDetails
	}
	return st.Err()
}

// parseCode reads a gRPC code name as statusFailure stores it
// ("NOT_FOUND"); OK is not a failure.
func parseCode(s string) (codes.Code, bool) {
	if s == "" || strings.ContainsAny(s, `"\`) {
		return 0, false
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil || c == codes.OK {
		return 0, false
	}
	return c, true
}

// outcome maps the handler's result to the record to store, or to the
// error the runtime classifies (ctx is the handler's context):
//
//   - an error that leaves the outcome unknown (runtime.Uncertain: a timeout
//     or a cancellation anywhere in its tree) as it is, whatever its code:
//     UNKNOWN;
//   - an error the handler marked (runtime.Marked: runtime.Permanent or
//     runtime.Retryable, the first in its tree, or an unmarked error
//     matching runtime.ErrPermanent) by its mark, whatever its code: a
//     permanent status is stored as one, anything else marked is handed to
//     the runtime as it is;
//   - a plain error (not a status) and an Unknown or Internal status not
//     listed in [RetryableCodes] as it is: they are no code the handler
//     chose, so the runtime's classification decides (runtime.Retryable and
//     runtime.Permanent, else the error policy: UNKNOWN by default);
//   - a retryable code returned after ctx ended: UNKNOWN, whatever the error
//     policy (the handler gave up waiting on something that may have acted);
//   - another retryable code: released;
//   - any other status: stored as a permanent failure.
//
// Reading the error calls its methods (GRPCStatus, Timeout, Is, As): when
// one panics, the error goes to the runtime as it is, which classifies it
// under recover (UNKNOWN, with a note saying so, by default), as for
// runtime.Do.
func (cfg *config) outcome(ctx context.Context, out any, herr error) (record, error) {
	if herr != nil {
		return record{}, cfg.errorOutcome(ctx, errtree.Acyclic(herr)) // status.FromError's errors.As would loop on a cycle
	}
	m, ok := out.(proto.Message)
	if !ok || m == nil {
		return record{}, runtime.Retryable(errors.New("idemgrpc: the handler returned no proto message"))
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// The handler succeeded but its response cannot be stored: record
		// the success without one (duplicates get RESPONSE_NOT_STORED).
		return record{}, nil
	}
	return record{Type: string(m.ProtoReflect().Descriptor().FullName()), Message: b}, nil
}

// errorOutcome is what outcome hands the runtime for the handler's error
// herr (see outcome). Reading herr calls its methods (GRPCStatus, Timeout,
// Is, As): code of the handler's. One that panics hands herr itself to the
// runtime, which classifies it under recover. A panic is told by the
// reading not returning, not by recover's value: a method that panics with
// nil under GODEBUG=panicnil=1 recovers as nil, and must not turn herr into
// no error at all (a failed call recorded as a success).
func (cfg *config) errorOutcome(ctx context.Context, herr error) (err error) {
	returned := false
	defer func() {
		if !returned {
			recover()
			err = herr
		}
	}()
	err = cfg.readError(ctx, herr)
	returned = true
	return err
}

// recordsFailed reports whether rt records err, an effect's error, as
// FAILED. An error whose methods panic is not: the runtime classifies it
// under recover, UNKNOWN by default.
func recordsFailed(rt *runtime.Runtime, err error) (failed bool) {
	defer func() { _ = recover() }()
	return rt.Classify(err) == runtime.StateFailed
}

// readError is errorOutcome without its recover.
func (cfg *config) readError(ctx context.Context, herr error) error {
	st, isStatus := status.FromError(herr)
	mark, marked := runtime.Marked(herr)
	switch c := st.Code(); {
	case runtime.Uncertain(herr):
		return herr
	case marked && mark == runtime.StateFailed && isStatus:
		return runtime.Permanent(&statusFailure{st})
	case marked:
		return herr // the handler's mark decides, not the code
	case !isStatus, (c == codes.Unknown || c == codes.Internal) && !cfg.retryable(c):
		return herr
	case cfg.retryable(c) && ctx.Err() != nil:
		return &uncertainCode{c, herr, []error{ctx.Err(), context.Cause(ctx)}}
	case cfg.retryable(c):
		return runtime.Retryable(&codeError{c, herr})
	}
	return runtime.Permanent(&statusFailure{st})
}

// statusFailure is a handler's error status stored as a permanent failure:
// its message and its code's name ("NOT_FOUND") as the record's message and
// code, and the status itself (with its details) as the failure's detail
// (runtime.Detailer). A status too large for the store loses its detail
// first, then its message is shortened: duplicates still get the code.
type statusFailure struct{ st *status.Status }

var _ runtime.Detailer = (*statusFailure)(nil)

func (e *statusFailure) Error() string     { return e.st.Message() }
func (e *statusFailure) ErrorCode() string { return code.Code_name[int32(e.st.Code())] }

// FailureDetail returns the encoded status (runtime.Detailer).
func (e *statusFailure) FailureDetail() []byte {
	b, err := proto.Marshal(e.st.Proto())
	if err != nil {
		return nil
	}
	return b
}

func (cfg *config) replay(ctx context.Context, fullMethod string, rec record) (any, error) {
	md := cfg.storedHeader(rec.Header)
	md.Set(ReplayedMetadata, "true")
	_ = grpc.SetHeader(ctx, md)
	if rec.Status != nil {
		sp := &spb.Status{}
		if err := proto.Unmarshal(rec.Status, sp); err != nil {
			return nil, unreadable(ctx, cfg.logger, fullMethod, fmt.Errorf("the stored status cannot be decoded: %w", err))
		}
		return nil, status.ErrorProto(sp)
	}
	if rec.Type == "" {
		return nil, notStored(ctx)
	}
	if out, ok := methodOutput(fullMethod); ok && out != protoreflect.FullName(rec.Type) {
		// A record resolved by hand naming another registered type: the
		// client would decode its bytes as its own reply type, a made-up
		// answer (review r57).
		return nil, unreadable(ctx, cfg.logger, fullMethod, fmt.Errorf("the stored response is a %s, but %s answers %s", rec.Type, fullMethod, out))
	}
	mt, err := cfg.resolver.FindMessageByName(protoreflect.FullName(rec.Type))
	if err != nil {
		return nil, unreadable(ctx, cfg.logger, fullMethod, fmt.Errorf("the stored response's type %q is not registered: %w", rec.Type, err))
	}
	m := mt.New().Interface()
	if rec.JSONMessage != nil {
		err = cfg.protojson().Unmarshal(rec.JSONMessage, m)
	} else {
		err = proto.Unmarshal(rec.Message, m)
	}
	if err != nil {
		return nil, unreadable(ctx, cfg.logger, fullMethod, fmt.Errorf("the stored response (type %q) cannot be decoded: %w", rec.Type, err))
	}
	return m, nil
}

// methodOutput is the full name of the reply type of the method named by
// fullMethod ("/pkg.Service/Method"), when its service is in the global
// registry of proto files (a generated service is; a hand-written one need
// not be).
func methodOutput(fullMethod string) (protoreflect.FullName, bool) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return "", false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return "", false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return "", false
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return "", false
	}
	return md.Output().FullName(), true
}

// unreadable is the answer to a stored outcome the interceptor cannot read
// (a record resolved by hand in a wrong form, a type not registered, a
// message its type cannot parse): logged, and answered Internal with
// RECORD_UNREADABLE.
func unreadable(ctx context.Context, logger *slog.Logger, fullMethod string, err error) error {
	logger.ErrorContext(ctx, "idemgrpc: the stored outcome cannot be read; answered Internal", "method", fullMethod, "err", err)
	return errStatus(ctx, codes.Internal, ReasonRecordUnreadable, "the stored outcome of the call with this idempotency key cannot be read", 0)
}

func notStored(ctx context.Context) error {
	return errStatus(ctx, codes.AlreadyExists, ReasonResponseNotStored, "the call with this idempotency key succeeded; its response was not stored, so it cannot be replayed", 0)
}

// PushbackMetadata is the trailer through which grpc-go's retry policy
// takes a server's retry advice, in milliseconds (gRFC A6); the interceptor
// sends it with every RetryInfo.
const PushbackMetadata = "grpc-retry-pushback-ms"

// errStatus is an interceptor error: ErrorInfo, and when retry is positive
// a RetryInfo and the grpc-retry-pushback-ms trailer.
func errStatus(ctx context.Context, c codes.Code, reason, msg string, retry time.Duration) error {
	st := status.New(c, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: Domain}}
	if retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
		_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackMetadata, strconv.FormatInt(retry.Milliseconds(), 10)))
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// operation is the full method name, or a fixed-size name derived from it
// when it is not a valid operation (over 255 bytes, not UTF-8, or with
// control bytes), or when it contains the digests' marker (see idname.Fit).
func operation(fullMethod string) string {
	return idname.Fit(fullMethod, runtime.MaxKeyLen)
}

// uncertainCode is a retryable code returned after the handler's context
// ended (see config.outcome): it unwraps to the handler's error, the
// context's error and its cause, so runtime.Uncertain holds and the record
// is UNKNOWN.
type uncertainCode struct {
	code   codes.Code
	err    error
	causes []error
}

func (e *uncertainCode) Error() string {
	return "handler answered " + e.code.String() + " after its context ended: " + errors.Join(e.causes...).Error()
}
func (e *uncertainCode) Unwrap() []error { return append([]error{e.err}, e.causes...) }

// codeError is a retryable handler error: the key is released.
type codeError struct {
	code codes.Code
	err  error
}

func (e *codeError) Error() string { return "handler answered " + e.code.String() }
func (e *codeError) Unwrap() error { return e.err }

// handlerPanicked is the effect's error when the handler panicked: the
// key is released, and the panic re-raised once the record is.
type handlerPanicked struct{}

func (handlerPanicked) Error() string { return "idemgrpc: handler panicked" }

type panicked struct {
	value any
	stack []byte
}

func callRecovering(ctx context.Context, h grpc.UnaryHandler, req any) (out any, p *panicked, err error) {
	returned := false
	defer func() {
		if !returned { // recover's value is nil for panic(nil) under GODEBUG=panicnil=1
			p = &panicked{value: recover(), stack: debug.Stack()}
		}
	}()
	out, err = h(ctx, req)
	returned = true
	return out, nil, err
}
