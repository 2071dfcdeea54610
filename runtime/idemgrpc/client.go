package idemgrpc

import (
	"context"
	"crypto/rand"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ClientOption configures the client interceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	metadata string
	methods  func(fullMethod string) bool
	newKey   func() string
}

// ClientMetadata sets the metadata key the client interceptor sends (default
// [DefaultMetadata]).
func ClientMetadata(key string) ClientOption {
	return func(c *clientConfig) { c.metadata = key }
}

// ClientMethods sets which methods get a key (default: all unary methods).
func ClientMethods(f func(fullMethod string) bool) ClientOption {
	return func(c *clientConfig) { c.methods = f }
}

// KeyGenerator sets how keys are made (default [NewKey]).
func KeyGenerator(f func() string) ClientOption { return func(c *clientConfig) { c.newKey = f } }

type keyCtx struct{}

// WithKey returns a context whose calls carry key: use it around an
// application-level retry loop, so that every attempt of one logical call
// sends the same key. Calls whose outgoing metadata already has a key keep
// it.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// WithNewKey is WithKey with a fresh key.
func WithNewKey(ctx context.Context) context.Context { return WithKey(ctx, NewKey()) }

// KeyFrom returns the key set by WithKey.
func KeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// NewKey returns a random version 4 UUID.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// UnaryClientInterceptor returns the client interceptor: each call that has
// no key in its outgoing metadata gets one, the context's (see [WithKey]) or
// a new one. The key is attached once per logical call, before grpc's own
// retries (a service config retryPolicy, transparent retries), which resend
// the same metadata: every attempt of the call carries the same key, so the
// server runs the handler at most once however many attempts reach it.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	cfg := &clientConfig{metadata: DefaultMetadata, methods: func(string) bool { return true }, newKey: NewKey}
	for _, o := range opts {
		o(cfg)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if cfg.methods(method) {
			if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(cfg.metadata)) == 0 {
				key, ok := KeyFrom(ctx)
				if !ok {
					key = cfg.newKey()
				}
				ctx = metadata.AppendToOutgoingContext(ctx, cfg.metadata, key)
			}
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}
