package idemgrpc_test

// Adversarial review (h9): attacks on idemgrpc's promises over a loopback
// grpc server on the memory store.

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// reviewServer serves one unary method whose handler is h, behind the
// server interceptor, and returns a client connection with the client
// interceptor.
func reviewServer(t *testing.T, h func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error)) *grpc.ClientConn {
	t.Helper()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	return reviewServerOn(t, rt, h, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
}

// reviewServerOn is reviewServer on rt, the client dialled with opts.
func reviewServerOn(t *testing.T, rt *runtime.Runtime, h func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error), opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Required(true))))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "idemtest.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := &structpb.Struct{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, req any) (any, error) {
				return h(ctx, req.(*structpb.Struct))
			})
		}}},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })
	return conn
}

func reviewInvoke(ctx context.Context, conn *grpc.ClientConn) error {
	req, _ := structpb.NewStruct(map[string]any{"cents": 100})
	return conn.Invoke(ctx, method, req, &structpb.Struct{})
}

// Promise (README, docs/http.md): the gRPC interceptor has "the
// middleware's semantics"; "a timeout or cancellation anywhere in a
// handler's error UNKNOWN whatever its code"; for HTTP "a 5xx ... written
// after the request's context ended is UNKNOWN, never run again". Attack:
// the handler's downstream applied the charge, the caller's deadline ends
// the wait, and the handler answers as gRPC code usually does,
// status.Error(codes.Unavailable, ...) built from the context's error (no
// error tree left). The interceptor releases the key; the retry charges
// again.
func TestReviewGRPCRetryableStatusAfterDeadline(t *testing.T) {
	var effects atomic.Int32
	conn := reviewServer(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		effects.Add(1) // the gateway applied the charge
		<-ctx.Done()   // its answer never came back in time
		return nil, status.Errorf(codes.Unavailable, "payment gateway: %v", ctx.Err())
	})
	ctx := idemgrpc.WithKey(context.Background(), "k-deadline")
	c1, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	err1 := reviewInvoke(c1, conn)
	cancel()
	time.Sleep(100 * time.Millisecond) // the server side finished recording
	c2, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	err2 := reviewInvoke(c2, conn)
	cancel()
	time.Sleep(100 * time.Millisecond)
	if n := effects.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key (first: %v; retry: %v): a retryable status returned after the caller's deadline released the key", n, err1, err2)
	}
}

// Promise (README "Use"): "Anything else is UNKNOWN ...: the safe default,
// because an unclassified error after a remote call does not tell whether
// the effect happened". Attack: the handler's downstream connection is
// reset after the request went out (the canonical "may have happened"),
// and the handler returns that error unwrapped, as a plain Go error. grpc
// gives it code Unknown, which idemgrpc's default RetryableCodes release
// (docs/http.md says so): the retry runs the handler again.
func TestReviewGRPCUnclassifiedErrorReleases(t *testing.T) {
	var effects atomic.Int32
	conn := reviewServer(t, func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
		effects.Add(1)
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	})
	ctx := idemgrpc.WithKey(context.Background(), "k-reset")
	err1 := reviewInvoke(ctx, conn)
	err2 := reviewInvoke(ctx, conn)
	rt, _ := runtime.New(memstore.New())
	if st := rt.Classify(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}); st != runtime.StateUnknown {
		t.Fatalf("runtime.Do would record %q for this error", st)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key (first: %v; retry: %v): an unclassified error after the remote call released the key", n, err1, err2)
	}
}
