package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb" // registers google.protobuf.Int64Value

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md, "Records resolved by hand": "A record the adapter cannot
// read is answered record-unreadable / RECORD_UNREADABLE and logged."
// idemgrpc's package doc: "The interceptor's own errors carry an
// errdetails.ErrorInfo (domain Domain, reason one of the Reason
// constants)", and its table: "stored outcome unreadable  Internal
// RECORD_UNREADABLE".
//
// Schedule: a call times out (UNKNOWN); an operator resolves it with
// idemctl's documented gRPC form, but names a type the server's registry
// does not hold (a typo) or gives a message its type cannot read; the
// duplicate is answered Internal with no ErrorInfo at all, so a client
// switching on the reason cannot tell it from any other Internal.
func TestR56GRPCUnreadableResolvedRecordNoReason(t *testing.T) {
	const method = "/r56.Payments/Charge"
	cases := []struct{ name, response string }{
		{"unregistered type", `{"type":"r56.NoSuchReply","message":{"id":"ch_1"}}`},
		{"message its type cannot read", `{"type":"google.protobuf.Int64Value","message":{"value":"x"}}`},
		{"message without its type (a wrong form)", `{"message":{"id":"ch_1"}}`},
		{"message neither object nor string (a wrong form)", `{"type":"google.protobuf.Struct","message":[1]}`},
	}
	failed := 0
	for i, c := range cases {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		icpt := idemgrpc.UnaryServerInterceptor(rt)
		key := "k" + string(rune('1'+i))
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
		info := &grpc.UnaryServerInfo{FullMethod: method}
		req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
		runs := 0
		handler := func(ctx context.Context, req any) (any, error) {
			runs++
			return nil, status.Error(codes.DeadlineExceeded, "gateway timed out")
		}
		if _, err := icpt(ctx, req, info, handler); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("%s: first call: %v", c.name, err)
		}
		id := runtime.Identity{Operation: method, Key: key}
		if rec, err := rt.Store().Get(context.Background(), id); err != nil || rec.State != runtime.StateUnknown {
			t.Fatalf("%s: record after the timeout: %+v %v", c.name, rec.State, err)
		}
		if _, err := runtime.Resolve(context.Background(), rt.Store(), runtime.Resolution{ID: id, To: runtime.ResolveSuccess,
			Response: []byte(c.response), Reason: "found in the gateway", Owner: "idemctl:alice"}); err != nil {
			t.Fatalf("%s: resolve: %v", c.name, err)
		}
		resp, err := icpt(ctx, req, info, handler)
		st := status.Convert(err)
		reason := ""
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				reason = ei.GetReason()
			}
		}
		if runs != 1 {
			t.Errorf("%s: handler ran %d times", c.name, runs)
		}
		if st.Code() != codes.Internal || reason != idemgrpc.ReasonRecordUnreadable {
			failed++
			t.Errorf("%s: duplicate answered %v %q with ErrorInfo reason %q (resp %v); want Internal %s", c.name, st.Code(), st.Message(), reason, resp, idemgrpc.ReasonRecordUnreadable)
		}
	}
	t.Logf("%d of %d unreadable records answered without RECORD_UNREADABLE", failed, len(cases))
}
