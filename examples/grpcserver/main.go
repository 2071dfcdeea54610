// Command grpcserver shows runtime/idemgrpc end to end on loopback: a gRPC
// payment method made idempotent by the server interceptor, called through
// the client interceptor and grpc's retry policy. The network loses the
// first response after the charge was made; grpc retries with the same key
// and gets the stored response, so the card is charged once.
//
//	go run ./examples/grpcserver
//
// The messages are structpb.Struct, so that the example needs no generated
// code; a real service uses its own .proto messages the same way.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

const chargeMethod = "/payments.Payments/Charge"

const retryPolicy = `{"methodConfig":[{"name":[{"service":"payments.Payments"}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.05s","maxBackoff":"0.2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	var charges atomic.Int32
	var loseNext atomic.Bool
	loseNext.Store(true)
	// flakyNetwork loses the first successful response, after the charge.
	flakyNetwork := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if err == nil && loseNext.CompareAndSwap(true, false) {
			fmt.Fprintln(out, "  server: charged, but the response is lost on the way back")
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(flakyNetwork, idemgrpc.UnaryServerInterceptor(rt,
		idemgrpc.Required(true),
		idemgrpc.Logger(slog.New(slog.DiscardHandler)),
		idemgrpc.Scope(func(ctx context.Context) string { // a toy principal
			md, _ := metadata.FromIncomingContext(ctx)
			return strings.Join(md.Get("x-account"), "")
		}),
	)))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "payments.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := &structpb.Struct{}
			if err := dec(in); err != nil {
				return nil, err
			}
			charge := func(ctx context.Context, req any) (any, error) {
				n := charges.Add(1)
				cents := req.(*structpb.Struct).Fields["cents"].GetNumberValue()
				return structpb.NewStruct(map[string]any{"id": fmt.Sprintf("ch_%03d", n), "cents": cents})
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: chargeMethod}, charge)
		}}},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()),
		grpc.WithDefaultServiceConfig(retryPolicy),
	)
	if err != nil {
		return fmt.Errorf("dialling: %w", err)
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-account", "acme")
	charge := func(ctx context.Context, label string, cents float64) {
		req, _ := structpb.NewStruct(map[string]any{"cents": cents})
		resp := &structpb.Struct{}
		var hdr metadata.MD
		err := conn.Invoke(ctx, chargeMethod, req, resp, grpc.Header(&hdr))
		switch {
		case err != nil:
			reason := ""
			for _, d := range status.Convert(err).Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					reason = info.Reason
				}
			}
			fmt.Fprintf(out, "%s -> %v %s\n", label, status.Code(err), reason)
		default:
			replayed := ""
			if strings.Join(hdr.Get(idemgrpc.ReplayedMetadata), "") == "true" {
				replayed = " (replayed)"
			}
			fmt.Fprintf(out, "%s -> %s%s\n", label, resp.Fields["id"].GetStringValue(), replayed)
		}
	}
	fmt.Fprintln(out, "charge 1000 (grpc retries with the same key):")
	charge(ctx, "charge 1000", 1000)
	charge(ctx, "another charge 1000 (a new logical call, a new key)", 1000)
	kctx := idemgrpc.WithKey(ctx, "order-42")
	charge(kctx, "order-42 charge 500", 500)
	charge(kctx, "order-42 retried by the application", 500)
	charge(kctx, "order-42 with another amount", 7)
	fmt.Fprintf(out, "%d charges made\n", charges.Load())
	return nil
}
