package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// `idemctl resolve -to success` with each adapter's documented JSON makes
// a record the adapter replays: the handler answered that its downstream
// timed out (UNKNOWN), a person resolves it, and the retry gets the
// resolved answer without the handler running again.
func TestResolveForAdapters(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store, flags := b.open(t)
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			scope := "adapters-" + suffix()
			resolve := func(op, key, response string) {
				t.Helper()
				var out, errOut bytes.Buffer
				args := append([]string{"resolve"}, flags...)
				args = append(args, "-scope", scope, "-op", op, "-key", key, "-to", "success", "-response", response, "-reason", "test", "-who", "test")
				if code := run(args, &out, &errOut); code != 0 {
					t.Fatalf("idemctl resolve: exit %d\n%s%s", code, out.String(), errOut.String())
				}
			}

			t.Run("idemhttp", func(t *testing.T) {
				runs := 0
				mux := http.NewServeMux()
				mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
					runs++
					http.Error(w, "the gateway did not answer", http.StatusGatewayTimeout)
				})
				srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)),
					idemhttp.Scope(func(*http.Request) string { return scope }))(mux))
				defer srv.Close()
				post := func() (*http.Response, string) {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"cents":1000}`))
					req.Header.Set(idemhttp.DefaultHeader, "http-1")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					body, _ := io.ReadAll(resp.Body)
					return resp, string(body)
				}
				if resp, _ := post(); resp.StatusCode != http.StatusGatewayTimeout {
					t.Fatalf("first: %d", resp.StatusCode)
				}
				resolve("POST /charges", "http-1", `{"status":201,"headers":{"Content-Type":"application/json","Location":"/charges/ch_1"},"body":{"id":"ch_1"}}`)
				resp, body := post()
				if resp.StatusCode != http.StatusCreated || body != `{"id":"ch_1"}` || resp.Header.Get("Location") != "/charges/ch_1" ||
					resp.Header.Get(idemhttp.ReplayedHeader) != "true" || runs != 1 {
					t.Fatalf("after resolve: %d %v %s (runs %d)", resp.StatusCode, resp.Header, body, runs)
				}
			})

			t.Run("idemgrpc", func(t *testing.T) {
				const method = "/payments.Payments/Charge"
				runs := 0
				srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(rt,
					idemgrpc.Logger(slog.New(slog.DiscardHandler)),
					idemgrpc.Scope(func(context.Context) string { return scope }))))
				srv.RegisterService(&grpc.ServiceDesc{
					ServiceName: "payments.Payments",
					HandlerType: (*any)(nil),
					Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
						in := &structpb.Struct{}
						if err := dec(in); err != nil {
							return nil, err
						}
						return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
							runs++
							return nil, context.DeadlineExceeded // the gateway did not answer
						})
					}}},
				}, nil)
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = srv.Serve(lis) }()
				defer srv.Stop()
				conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				call := func() (*structpb.Struct, metadata.MD, error) {
					ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.DefaultMetadata, "grpc-1")
					req, _ := structpb.NewStruct(map[string]any{"cents": 1000})
					resp := &structpb.Struct{}
					var hdr metadata.MD
					err := conn.Invoke(ctx, method, req, resp, grpc.Header(&hdr))
					return resp, hdr, err
				}
				if _, _, err := call(); err == nil {
					t.Fatal("first call succeeded")
				}
				resolve(method, "grpc-1", `{"type":"google.protobuf.Struct","message":{"id":"ch_1","cents":1000}}`)
				resp, hdr, err := call()
				if err != nil || resp.Fields["id"].GetStringValue() != "ch_1" || strings.Join(hdr.Get(idemgrpc.ReplayedMetadata), "") != "true" || runs != 1 {
					t.Fatalf("after resolve: %v %v %v (runs %d)", resp, hdr, err, runs)
				}
			})
		})
	}
}
