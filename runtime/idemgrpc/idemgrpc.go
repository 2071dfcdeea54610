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
// (see [Metadata]); the operation is the full method name; the fingerprint
// is the SHA-256 of the method and the deterministic proto encoding of the
// request (only digests are stored). The handler's response message is
// stored (its full name and deterministic encoding) and replayed, with the
// header metadata "idempotent-replayed: true"; so is an error status that
// is not retryable (InvalidArgument, NotFound, ... with its details).
// Retryable codes ([RetryableCodes]: Unavailable, ResourceExhausted,
// Aborted, Internal, Unknown by default) release the key; DeadlineExceeded
// and Canceled follow the runtime's rule (UNKNOWN: register a
// runtime.NoQueryPolicy for the method to converge them); a panicking
// handler releases the key and the panic is re-raised (put a recovering
// interceptor before this one: grpc-go does not recover panics).
//
// The interceptor's own errors carry an errdetails.ErrorInfo (domain
// [Domain], reason one of the Reason constants) and, when a retry may
// succeed, an errdetails.RetryInfo; their messages name no key, method or
// internal error:
//
//	missing, repeated or invalid key  InvalidArgument     KEY_MISSING, KEY_INVALID
//	key reused with another request   FailedPrecondition  KEY_REUSED
//	call with the key in flight       Aborted + retry     IN_PROGRESS (after the runtime's MaxWait)
//	outcome unknown, reconciling      Aborted + retry     OUTCOME_UNKNOWN
//	succeeded, response not stored    AlreadyExists       RESPONSE_NOT_STORED (stable for the TTL)
//	store outage                      Unavailable + retry STORE_UNAVAILABLE
package idemgrpc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

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

	"github.com/idemkit/idem/runtime"
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

// RetryableCodes sets which handler error codes release the key so that a
// retry runs the handler again (default: Unavailable, ResourceExhausted,
// Aborted, Internal, Unknown). Other codes are stored and replayed, except
// DeadlineExceeded and Canceled, which the runtime records as UNKNOWN.
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

// request is what the fingerprint covers.
type request struct {
	Method    string `json:"method"`
	MessageSz int    `json:"message_len"`
	SHA256    string `json:"message_sha256"`
}

// record is a stored outcome: a response message or an error status.
type record struct {
	Type    string `json:"type,omitempty"`
	Message []byte `json:"message,omitempty"`
	Status  []byte `json:"status,omitempty"`
}

// UnaryServerInterceptor returns the server interceptor on rt.
func UnaryServerInterceptor(rt *runtime.Runtime, opts ...Option) grpc.UnaryServerInterceptor {
	cfg := &config{
		metadata: DefaultMetadata, methods: func(string) bool { return true },
		retryable: func(c codes.Code) bool {
			switch c {
			case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
				return true
			}
			return false
		},
		resolver: protoregistry.GlobalTypes, logger: slog.Default(),
	}
	for _, o := range opts {
		o(cfg)
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
		return nil, errStatus(codes.InvalidArgument, ReasonKeyMissing, "this method needs an "+cfg.metadata+" metadata value", 0)
	case len(vals) == 0:
		return handler(ctx, req)
	case len(vals) > 1:
		return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid, fmt.Sprintf("the call has %d %s values; send exactly one", len(vals), cfg.metadata), 0)
	}
	key := vals[0]
	if runtime.ValidateKey(key) != nil {
		return nil, errStatus(codes.InvalidArgument, ReasonKeyInvalid, "the "+cfg.metadata+" metadata must be 1 to 255 bytes of visible ASCII", 0)
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Error(codes.Internal, "idempotent method with a request that is not a proto message")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "the request cannot be encoded")
	}
	if cfg.scope != nil {
		ctx = runtime.WithScope(ctx, cfg.scope(ctx))
	}
	sum := sha256.Sum256(append([]byte(info.FullMethod+"\x00"), b...))
	var (
		ran  bool
		out  any
		herr error
		pnc  *panicked
	)
	rec, err := runtime.Do(ctx, rt, runtime.Call[request, record]{
		Operation: operation(info.FullMethod),
		Key:       key,
		Request:   request{Method: info.FullMethod, MessageSz: len(b), SHA256: hex.EncodeToString(sum[:])},
		Effect: func(ctx context.Context, _ request) (record, error) {
			ran = true
			out, pnc, herr = callRecovering(ctx, handler, req)
			if pnc != nil {
				return record{}, runtime.Retryable(handlerPanicked{})
			}
			return cfg.outcome(out, herr)
		},
	})
	if ran { // this call ran the handler: its caller gets what it returned
		if pnc != nil {
			cfg.logger.ErrorContext(ctx, "idemgrpc: handler panicked; the key was released and the panic re-raised",
				"method", info.FullMethod, "panic", fmt.Sprint(pnc.value), "stack", string(pnc.stack))
			panic(pnc.value)
		}
		var ce *codeError
		if err != nil && !errors.As(err, &ce) && herr == nil {
			cfg.logger.WarnContext(ctx, "idemgrpc: the handler answered but its outcome was not recorded", "method", info.FullMethod, "err", err)
		}
		return out, herr
	}
	if err == nil {
		return cfg.replay(ctx, rec)
	}
	return nil, cfg.answer(ctx, info.FullMethod, err)
}

// answer maps an error of runtime.Do for a call that did not run the
// handler to the status its caller gets.
func (cfg *config) answer(ctx context.Context, fullMethod string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrNotReplayable):
		return notStored()
	case errors.Is(err, runtime.ErrInvalidKey):
		return errStatus(codes.InvalidArgument, ReasonKeyInvalid, "the idempotency key, or the scope it is used in, is not valid", 0)
	case errors.Is(err, runtime.ErrKeyReused):
		return errStatus(codes.FailedPrecondition, ReasonKeyReused, "this idempotency key was used with another request", 0)
	case errors.Is(err, runtime.ErrInProgress):
		return errStatus(codes.Aborted, ReasonInProgress, "a call with this idempotency key is still in progress; retry later", time.Second)
	case errors.Is(err, runtime.ErrOutcomeUnknown):
		return errStatus(codes.Aborted, ReasonOutcomeUnknown, "an earlier call with this idempotency key may or may not have taken effect; it is being reconciled", 5*time.Second)
	}
	cfg.logger.ErrorContext(ctx, "idemgrpc: the idempotency store failed; answered Unavailable", "method", fullMethod, "err", err)
	return errStatus(codes.Unavailable, ReasonStoreUnavailable, "the idempotency store is unavailable; retry later", 2*time.Second)
}

// outcome maps the handler's result to the record to store, or to an error
// that releases the key (retryable codes) or leaves it UNKNOWN (deadline,
// cancellation).
func (cfg *config) outcome(out any, herr error) (record, error) {
	if herr != nil {
		st := status.Convert(herr)
		switch {
		case st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled:
			return record{}, herr
		case cfg.retryable(st.Code()):
			return record{}, runtime.Retryable(&codeError{st.Code()})
		}
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			return record{}, runtime.Retryable(&codeError{st.Code()})
		}
		return record{Status: b}, nil
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

func (cfg *config) replay(ctx context.Context, rec record) (any, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedMetadata, "true"))
	if rec.Status != nil {
		sp := &spb.Status{}
		if err := proto.Unmarshal(rec.Status, sp); err != nil {
			return nil, status.Error(codes.Internal, "the stored error cannot be decoded")
		}
		return nil, status.ErrorProto(sp)
	}
	if rec.Type == "" {
		return nil, notStored()
	}
	mt, err := cfg.resolver.FindMessageByName(protoreflect.FullName(rec.Type))
	if err != nil {
		cfg.logger.ErrorContext(ctx, "idemgrpc: the stored response's type is not registered", "type", rec.Type, "err", err)
		return nil, status.Error(codes.Internal, "the stored response cannot be decoded")
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.Message, m); err != nil {
		return nil, status.Error(codes.Internal, "the stored response cannot be decoded")
	}
	return m, nil
}

func notStored() error {
	return errStatus(codes.AlreadyExists, ReasonResponseNotStored, "the call with this idempotency key succeeded; its response was not stored, so it cannot be replayed", 0)
}

// errStatus is an interceptor error: ErrorInfo, and RetryInfo when retry
// is positive.
func errStatus(c codes.Code, reason, msg string, retry time.Duration) error {
	st := status.New(c, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: Domain}}
	if retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// operation is the full method name, or a fixed-size name derived from it
// when it is not a valid operation (over 255 bytes, or not UTF-8).
func operation(fullMethod string) string {
	if len(fullMethod) <= runtime.MaxKeyLen && utf8.ValidString(fullMethod) && fullMethod != "" {
		return fullMethod
	}
	sum := sha256.Sum256([]byte(fullMethod))
	return strings.ToValidUTF8(fullMethod[:min(len(fullMethod), 64)], "") + "…#sha256:" + hex.EncodeToString(sum[:])
}

type codeError struct{ code codes.Code }

func (e *codeError) Error() string { return "handler answered " + e.code.String() }

// handlerPanicked is the effect's error when the handler panicked: the
// key is released, and the panic re-raised once the record is.
type handlerPanicked struct{}

func (handlerPanicked) Error() string { return "idemgrpc: handler panicked" }

type panicked struct {
	value any
	stack []byte
}

func callRecovering(ctx context.Context, h grpc.UnaryHandler, req any) (out any, p *panicked, err error) {
	defer func() {
		if v := recover(); v != nil {
			p = &panicked{value: v, stack: debug.Stack()}
		}
	}()
	out, err = h(ctx, req)
	return out, nil, err
}
