package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

const method = "/idemtest.Payments/Charge"

// fixture is a real grpc server on a loopback listener with the
// interceptor, serving one hand-written method on structpb messages.
type fixture struct {
	conn     *grpc.ClientConn
	rt       *runtime.Runtime
	served   chan error // what the interceptor chain below lossy answered, per call (buffered)
	runs     atomic.Int32
	attempts atomic.Int32 // calls that reached the server
	keysSeen sync.Map     // key -> attempts
	block    chan struct{}
	caught   atomic.Value // panic value an outer interceptor recovered
	loseOnce atomic.Bool  // drop the first successful response (Unavailable)
	ledger   *sync.Map    // order -> charge, the downstream's own record (mode effect-then-timeout)
}

type setup struct {
	store   runtime.Store
	rtOpts  []runtime.Option
	opts    []idemgrpc.Option
	dial    []grpc.DialOption
	loseOne bool
	ledger  *sync.Map
}

func start(t *testing.T, s setup) *fixture {
	t.Helper()
	rt, err := runtime.New(s.store, s.rtOpts...)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rt: rt, block: make(chan struct{}), served: make(chan error, 100), ledger: s.ledger}
	f.loseOnce.Store(s.loseOne)
	opts := append([]idemgrpc.Option{
		idemgrpc.Required(true),
		idemgrpc.Logger(slog.New(slog.DiscardHandler)),
		idemgrpc.Scope(func(ctx context.Context) string {
			md, _ := metadata.FromIncomingContext(ctx)
			return strings.Join(md.Get("x-tenant-bin"), ",")
		}),
	}, s.opts...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(f.recoverer, f.lossy, idemgrpc.UnaryServerInterceptor(rt, opts...)))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "idemtest.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := &structpb.Struct{}
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return f.charge(ctx, req.(*structpb.Struct)) }
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, h)
		}}},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.dial...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(f.block)
		_ = conn.Close()
		srv.Stop()
	})
	f.conn = conn
	return f
}

func (f *fixture) recoverer(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	returned := false // a panic(nil) under GODEBUG=panicnil=1 recovers as nil
	defer func() {
		if !returned {
			v := recover()
			if v == nil {
				v = "panic(nil)"
			}
			f.caught.Store(v)
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
	}()
	resp, err = h(ctx, req)
	returned = true
	return resp, err
}

// lossy counts attempts and, when set, loses the first successful response.
func (f *fixture) lossy(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	f.attempts.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range md.Get(idemgrpc.DefaultMetadata) {
		n, _ := f.keysSeen.LoadOrStore(k, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	resp, err := h(ctx, req)
	select {
	case f.served <- err:
	default:
	}
	if err == nil && f.loseOnce.CompareAndSwap(true, false) {
		return nil, status.Error(codes.Unavailable, "connection reset (simulated)")
	}
	return resp, err
}

func (f *fixture) charge(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	n := f.runs.Add(1)
	switch in.Fields["mode"].GetStringValue() {
	case "effect-then-timeout": // the charge is made, but its answer comes too late
		charge, _ := structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", n), "cents": in.Fields["cents"].GetNumberValue()})
		f.ledger.Store(in.Fields["order"].GetStringValue(), charge)
		return nil, fmt.Errorf("charging: %w", context.DeadlineExceeded)
	case "wrapped-deadline": // the charge went out; its answer did not come back in time
		return nil, fmt.Errorf("charging: %w", context.DeadlineExceeded)
	case "url-timeout":
		return nil, fmt.Errorf("charging: %w", &url.Error{Op: "Post", URL: "https://psp.example/charges", Err: os.ErrDeadlineExceeded})
	case "wrapped-canceled":
		return nil, fmt.Errorf("charging: %w", context.Canceled)
	case "status-canceled":
		return nil, status.Error(codes.Canceled, "the payment service canceled the call")
	case "own-deadline": // waits for the caller's deadline, as a downstream call would
		<-ctx.Done()
		return nil, fmt.Errorf("charging: %w", ctx.Err())
	case "unavailable-after-deadline": // as own-deadline, but the handler builds a status from the context's error
		<-ctx.Done()
		return nil, status.Errorf(codes.Unavailable, "payment gateway: %v", ctx.Err())
	case "plain-reset": // a plain error: the downstream's connection was reset after the request went out
		return nil, fmt.Errorf("charging: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	case "status-unknown":
		return nil, status.Error(codes.Unknown, "the payment service failed")
	case "status-internal": // as a downstream's undecodable reply forwarded as it is
		return nil, status.Error(codes.Internal, "grpc: failed to unmarshal the response")
	case "retryable-plain":
		return nil, runtime.Retryable(errors.New("the charge was not sent: no route to the gateway"))
	case "permanent-plain":
		return nil, runtime.Permanent(errors.New("card declined"))
	case "header":
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", fmt.Sprintf("ch_%d", n), "authorization", "Bearer secret", "set-cookie", "s=1"))
	case "big-error":
		return nil, status.Error(codes.InvalidArgument, "card rejected: "+strings.Repeat("x", 1<<20+1))
	case "wait":
		time.Sleep(time.Second)
	case "unavailable-once":
		if n == 1 {
			return nil, status.Error(codes.Unavailable, "database down")
		}
	case "aborted-once": // a transaction conflict: nothing was done
		if n == 1 {
			return nil, status.Error(codes.Aborted, "serialization failure, retry")
		}
	case "notfound":
		st, _ := status.New(codes.NotFound, "no such card").WithDetails(&errdetails.ResourceInfo{ResourceType: "card", ResourceName: "card_1"})
		return nil, st.Err()
	case "panic-once":
		if n == 1 {
			panic("secret-panic-value")
		}
	case "panic-nil-once":
		if n == 1 {
			panic(nil)
		}
	case "slow":
		<-f.block
	case "sleep":
		time.Sleep(50 * time.Millisecond)
	case "big":
		return structpb.NewStruct(map[string]any{"blob": strings.Repeat("b", 1<<20+1)})
	}
	return structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", n), "cents": in.Fields["cents"].GetNumberValue()})
}

type call struct {
	tenant string
	keys   []string
	mode   string
	cents  float64
	order  string
}

type reply struct {
	resp     *structpb.Struct
	err      error
	replayed bool
	header   metadata.MD
	trailer  metadata.MD
}

func (f *fixture) call(t *testing.T, ctx context.Context, c call, opts ...grpc.CallOption) reply {
	t.Helper()
	req, _ := structpb.NewStruct(map[string]any{"mode": c.mode, "cents": c.cents, "order": c.order})
	md := metadata.Pairs("x-tenant-bin", c.tenant) // binary: any scope, "…" included
	for _, k := range c.keys {
		md.Append(idemgrpc.DefaultMetadata, k)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	var hdr, tr metadata.MD
	resp := &structpb.Struct{}
	err := f.conn.Invoke(ctx, method, req, resp, append(opts, grpc.Header(&hdr), grpc.Trailer(&tr))...)
	if err != nil {
		resp = nil
	}
	return reply{resp, err, strings.Join(hdr.Get(idemgrpc.ReplayedMetadata), "") == "true", hdr, tr}
}

// reason returns the ErrorInfo reason and whether a RetryInfo is attached.
func reason(err error) (string, bool) {
	var r string
	var retry bool
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			r = d.Reason
		case *errdetails.RetryInfo:
			retry = d.RetryDelay.AsDuration() > 0
		}
	}
	return r, retry
}

func wantCode(t *testing.T, got reply, code codes.Code, why string, retry bool) {
	t.Helper()
	st := status.Convert(got.err)
	r, rt := reason(got.err)
	if st.Code() != code || r != why || rt != retry {
		t.Fatalf("got %v (reason %q, retry info %v); want %v %q, retry info %v", got.err, r, rt, code, why, retry)
	}
	for _, internal := range []string{"secret", method, "idem:", "k1"} {
		if strings.Contains(st.Message(), internal) {
			t.Fatalf("message shows %q: %s", internal, st.Message())
		}
	}
}

// The scenarios of the HTTP middleware, on each store.
func TestServerScenarios(t *testing.T) {
	type scenario struct {
		name string
		s    setup
		run  func(t *testing.T, f *fixture, tenant string, limited bool)
	}
	ctx := context.Background()
	scenarios := []scenario{
		{"replay", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, cents: 100})
			b := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, cents: 100})
			if a.err != nil || b.err != nil || !proto.Equal(a.resp, b.resp) || a.replayed || !b.replayed || f.runs.Load() != 1 {
				t.Fatalf("first %v %v, second %v %v (replayed %v, runs %d)", a.resp, a.err, b.resp, b.err, b.replayed, f.runs.Load())
			}
		}},
		{"key reused with another request", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, cents: 100})
			wantCode(t, f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, cents: 5}), codes.FailedPrecondition, idemgrpc.ReasonKeyReused, false)
		}},
		{"key missing", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			wantCode(t, f.call(t, ctx, call{tenant: tenant}), codes.InvalidArgument, idemgrpc.ReasonKeyMissing, false)
		}},
		{"key empty, repeated or invalid", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			for _, ks := range [][]string{{""}, {"k1", "k2"}, {"has space"}, {strings.Repeat("k", 256)}} {
				wantCode(t, f.call(t, ctx, call{tenant: tenant, keys: ks}), codes.InvalidArgument, idemgrpc.ReasonKeyInvalid, false)
			}
			if f.runs.Load() != 0 {
				t.Fatalf("handler ran %d times", f.runs.Load())
			}
		}},
		{"tenants isolated", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			a := f.call(t, ctx, call{tenant: tenant + "-a", keys: []string{"k1"}, cents: 1})
			b := f.call(t, ctx, call{tenant: tenant + "-b", keys: []string{"k1"}, cents: 1})
			if a.err != nil || b.err != nil || proto.Equal(a.resp, b.resp) || b.replayed || f.runs.Load() != 2 {
				t.Fatalf("a %v %v, b %v %v", a.resp, a.err, b.resp, b.err)
			}
		}},
		{"retryable code releases the key", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "unavailable-once"})
			b := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "unavailable-once"})
			if status.Code(a.err) != codes.Unavailable || b.err != nil || b.replayed || f.runs.Load() != 2 {
				t.Fatalf("first %v, retry %v %v (runs %d)", a.err, b.resp, b.err, f.runs.Load())
			}
		}},
		{"error status stored and replayed with its details", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "notfound"})
			b := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "notfound"})
			if !proto.Equal(status.Convert(a.err).Proto(), status.Convert(b.err).Proto()) || status.Code(b.err) != codes.NotFound ||
				len(status.Convert(b.err).Details()) != 1 || !b.replayed || f.runs.Load() != 1 {
				t.Fatalf("first %v, replay %v (runs %d)", a.err, b.err, f.runs.Load())
			}
		}},
		{"in flight", setup{rtOpts: []runtime.Option{runtime.WithMaxWait(30 * time.Millisecond)}}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			go f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "slow"})
			for f.runs.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			wantCode(t, f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "slow"}), codes.Aborted, idemgrpc.ReasonInProgress, true)
		}},
		{"concurrent duplicates wait and share one run", setup{}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			var wg sync.WaitGroup
			replies := make([]reply, 8)
			for i := range replies {
				wg.Go(func() { replies[i] = f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "sleep"}) })
			}
			wg.Wait()
			for _, r := range replies {
				if r.err != nil || !proto.Equal(r.resp, replies[0].resp) {
					t.Fatalf("replies differ: %v %v / %v", r.resp, r.err, replies[0].resp)
				}
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
		}},
		{"panic releases the key and is re-raised", setup{rtOpts: []runtime.Option{runtime.WithRecoverPanics(true)}}, func(t *testing.T, f *fixture, tenant string, _ bool) {
			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "panic-once"})
			if f.caught.Load() != "secret-panic-value" || status.Code(a.err) != codes.Internal || strings.Contains(a.err.Error(), "secret") {
				t.Fatalf("first: %v (the outer interceptor caught %v)", a.err, f.caught.Load())
			}
			b := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "panic-once"})
			if b.err != nil || f.runs.Load() != 2 {
				t.Fatalf("retry after a panic: %v (runs %d)", b.err, f.runs.Load())
			}
		}},
		{"response too large for the store", setup{}, func(t *testing.T, f *fixture, tenant string, limited bool) {
			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "big"})
			if a.err != nil || len(a.resp.Fields["blob"].GetStringValue()) != 1<<20+1 {
				t.Fatalf("first: %v", a.err)
			}
			for range 2 {
				b := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "big"})
				if !limited {
					if b.err != nil || !b.replayed {
						t.Fatalf("memory store replay: %v", b.err)
					}
					continue
				}
				wantCode(t, b, codes.AlreadyExists, idemgrpc.ReasonResponseNotStored, false)
			}
			if f.runs.Load() != 1 {
				t.Fatalf("handler ran %d times", f.runs.Load())
			}
		}},
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					s := sc.s
					s.store = st.New(t)
					f := start(t, s)
					sc.run(t, f, teststores.Unique(), st.Name != "memory")
				})
			}
		})
	}
}

type failingStore struct{ runtime.Store }

func (failingStore) Claim(context.Context, runtime.ClaimParams) (runtime.ClaimResult, error) {
	return runtime.ClaimResult{}, errors.New("dial tcp secret-db-host:5432: connection refused")
}

func TestStoreOutage(t *testing.T) {
	f := start(t, setup{store: failingStore{memstore.New()}})
	wantCode(t, f.call(t, context.Background(), call{tenant: "a", keys: []string{"k1"}}), codes.Unavailable, idemgrpc.ReasonStoreUnavailable, true)
}

const retryPolicy = `{"methodConfig":[{"name":[{"service":"idemtest.Payments"}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// The client interceptor's key survives grpc's retry policy: the first
// response is lost after the handler ran, grpc retries with the same key,
// and the retry is a replay.
func TestClientKeyAcrossRetries(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			f := start(t, setup{store: st.New(t), loseOne: true, dial: []grpc.DialOption{
				grpc.WithDefaultServiceConfig(retryPolicy),
				grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()),
			}})
			ctx := context.Background()
			tenant := teststores.Unique()
			first := f.call(t, ctx, call{tenant: tenant, cents: 7})
			if first.err != nil || f.attempts.Load() != 2 || f.runs.Load() != 1 || !first.replayed {
				t.Fatalf("first logical call: %v (attempts %d, runs %d, replayed %v)", first.err, f.attempts.Load(), f.runs.Load(), first.replayed)
			}
			second := f.call(t, ctx, call{tenant: tenant, cents: 7})
			if second.err != nil || second.replayed || f.runs.Load() != 2 {
				t.Fatalf("second logical call reused a key: %v (runs %d)", second.err, f.runs.Load())
			}
			// An application-level retry loop shares one key through WithKey.
			rctx := idemgrpc.WithNewKey(ctx)
			a, b := f.call(t, rctx, call{tenant: tenant, cents: 8}), f.call(t, rctx, call{tenant: tenant, cents: 8})
			if a.err != nil || b.err != nil || !b.replayed || !proto.Equal(a.resp, b.resp) || f.runs.Load() != 3 {
				t.Fatalf("WithKey retries: %v %v (runs %d)", a.err, b.err, f.runs.Load())
			}
			keys := 0
			f.keysSeen.Range(func(k, n any) bool {
				keys++
				return true
			})
			if keys != 3 || f.attempts.Load() != 5 {
				t.Fatalf("%d distinct keys over %d attempts; want 3 over 5", keys, f.attempts.Load())
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	a, b := idemgrpc.NewKey(), idemgrpc.NewKey()
	if a == b || len(a) != 36 || runtime.ValidateKey(a) != nil || a[14] != '4' {
		t.Fatalf("keys %q %q", a, b)
	}
}

// The :authority a client sends (the host's case, a port, a trailing dot,
// another name for the same service) is no part of a call's identity: the
// operation is the method, the fingerprint the method and the message. On
// every store.
func TestAuthorityIsNoPartOfTheIdentity(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			f := start(t, setup{store: st.New(t)})
			ctx := context.Background()
			tenant := teststores.Unique()
			var first *structpb.Struct
			for i, authority := range []string{"api.example", "API.Example", "api.example:443", "api.example.", "payments.internal:8443"} {
				got := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, cents: 100}, grpc.CallAuthority(authority))
				if got.err != nil {
					t.Fatalf("%s: %v", authority, got.err)
				}
				if i == 0 {
					first = got.resp
				} else if !got.replayed || !proto.Equal(got.resp, first) {
					t.Fatalf("%s: %v (replayed %v); want the replay of %v", authority, got.resp, got.replayed, first)
				}
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}

// A handler's Aborted (a conflict: nothing was done, the call may be
// retried) releases the key: the retry runs the handler again.
func TestAbortedReleasesKey(t *testing.T) {
	f := start(t, setup{store: memstore.New()})
	ctx := context.Background()
	first := f.call(t, ctx, call{tenant: "t1", keys: []string{"k1"}, mode: "aborted-once", cents: 5})
	if status.Code(first.err) != codes.Aborted {
		t.Fatalf("first: %v, want Aborted", first.err)
	}
	again := f.call(t, ctx, call{tenant: "t1", keys: []string{"k1"}, mode: "aborted-once", cents: 5})
	if again.err != nil || again.replayed || f.runs.Load() != 2 {
		t.Fatalf("retry: %v (replayed %v, runs %d); want the handler run again", again.err, again.replayed, f.runs.Load())
	}
}
