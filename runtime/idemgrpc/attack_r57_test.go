package idemgrpc_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	_ "google.golang.org/protobuf/types/known/wrapperspb" // registers google.protobuf.Int64Value

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

type r57Health struct {
	healthpb.UnimplementedHealthServer
	runs atomic.Int32
}

func (s *r57Health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.runs.Add(1)
	return nil, status.Error(codes.DeadlineExceeded, "downstream timed out")
}

// docs/http.md, "Records resolved by hand": idemgrpc replays "the message
// of that full name"; "A record the adapter cannot read is answered
// record-unreadable / RECORD_UNREADABLE and logged." An operator names a
// registered type that is not the method's response type (a slip between
// two services' replies): the interceptor replays it as the method's
// answer, and the client decodes its bytes as the method's response type.
// Here google.rpc.Status{code: 1} (in protojson, the documented form)
// reaches a Health/Check caller as
// HealthCheckResponse{status: SERVING}: a made-up answer, silently.
func TestR57GRPCResolvedWrongTypeReplayed(t *testing.T) {
	r57Resolved(t, "k1", `{"type":"google.rpc.Status","message":{"code":1,"message":"ok"}}`)
}

// Not JSON (runtime.Resolve takes it; idemctl refuses invalid JSON): the
// duplicate is told AlreadyExists RESPONSE_NOT_STORED ("its response was
// not stored"), not RECORD_UNREADABLE, and nothing is logged.
func TestR57GRPCResolvedNotJSON(t *testing.T) {
	r57Resolved(t, "k2", `{"type":"grpc.health.v1.HealthCheckResponse","message":{"status":"SERVING"}} x`)
}

func r57Resolved(t *testing.T, key, response string) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(rt)))
	h := &r57Health{}
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key)
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "pay"}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("first call: %v", err)
	}
	id := runtime.Identity{Operation: "/grpc.health.v1.Health/Check", Key: key}
	if rec, err := rt.Store().Get(context.Background(), id); err != nil || rec.State != runtime.StateUnknown {
		t.Fatalf("record after the timeout: %v %v", rec.State, err)
	}
	if _, err := runtime.Resolve(context.Background(), rt.Store(), runtime.Resolution{ID: id, To: runtime.ResolveSuccess,
		Response: []byte(response), Reason: "ops", Owner: "idemctl:alice"}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "pay"})
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.GetReason()
		}
	}
	t.Logf("resp %v err %v reason %q", resp, err, reason)
	if h.runs.Load() != 1 {
		t.Errorf("handler ran %d times", h.runs.Load())
	}
	if st.Code() != codes.Internal || reason != idemgrpc.ReasonRecordUnreadable {
		t.Fatalf("duplicate got resp %v (status %v), err %v %q; want Internal %s", resp, resp.GetStatus(), st.Code(), reason, idemgrpc.ReasonRecordUnreadable)
	}
}
