package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md answer table, gRPC column: "the request's context ended
// because a placement of the middleware (an interceptor) around this one
// could not confirm its lease and stopped its handler (the context's cause
// is ErrLeaseLost) | ... | Aborted IN_PROGRESS, RetryInfo 1 s"; "The rows
// are read from the top ... a route's query stopped by an outer placement's
// lease rule ... that returns ctx.Err() leaves the call UNKNOWN and is
// answered by the ErrOutcomeUnknown row ..., and one that returns
// context.Cause(ctx) ... by the in-progress row: neither is final, and the
// handler does not run again". The gRPC twin of
// TestR51OuterLeaseRuleDuringInlineQuery.
func TestR52GRPCOuterLeaseRuleDuringInlineQuery(t *testing.T) {
	for _, mode := range []string{"ctx.Err", "context.Cause", "status"} {
		t.Run(mode, func(t *testing.T) {
			shared, err := runtime.New(memstore.New(), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var runs, asked atomic.Int32
			var answer atomic.Bool
			const method = "/shop.S/Pay"
			q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
				asked.Add(1)
				if answer.Load() {
					m, _ := structpb.NewStruct(map[string]any{"charged": true})
					return m, runtime.OutcomeSucceeded, nil
				}
				<-ctx.Done()
				switch mode {
				case "context.Cause":
					return nil, runtime.OutcomeUnknown, context.Cause(ctx)
				case "status":
					return nil, runtime.OutcomeUnknown, status.FromContextError(ctx.Err()).Err()
				}
				return nil, runtime.OutcomeUnknown, ctx.Err()
			}
			route := idemgrpc.UnaryServerInterceptor(shared, idemgrpc.Query(method, q, runtime.QueryOptions{}))
			stalled, err := runtime.New(teststores.NoRenewals{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			healthy, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			info := &grpc.UnaryServerInfo{FullMethod: method}
			handler := func(ctx context.Context, req any) (any, error) {
				runs.Add(1)
				return nil, status.Error(codes.DeadlineExceeded, "downstream timed out")
			}
			key := "k-r52-q-" + teststores.Unique()
			call := func(rt *runtime.Runtime) (any, error) {
				outer := idemgrpc.UnaryServerInterceptor(rt)
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
				req, _ := structpb.NewStruct(map[string]any{"cents": 100})
				return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return route(ctx, req, info, handler) })
			}
			testenv.Within(t, 15*time.Second, func() {
				_, err := call(healthy)
				if status.Code(err) != codes.DeadlineExceeded {
					t.Errorf("first: %v", err)
				}
				_, err = call(stalled)
				st := status.Convert(err)
				r, retry := reason(err)
				t.Logf("retry behind the stalled outer interceptor: %v %q reason %q retry %v (query asked %d)", st.Code(), st.Message(), r, retry, asked.Load())
				want := idemgrpc.ReasonOutcomeUnknown
				if mode == "context.Cause" {
					want = idemgrpc.ReasonInProgress
				}
				if st.Code() != codes.Aborted || r != want {
					t.Errorf("a call whose outer interceptor's lease rule stopped the method's inline query: %v %q (reason %q), want Aborted %s", st.Code(), st.Message(), r, want)
				}
				answer.Store(true)
				resp, err := call(healthy)
				if err != nil {
					t.Errorf("retry after the downstream answers: %v, want the queried response", err)
				} else if s, ok := resp.(*structpb.Struct); !ok || !s.Fields["charged"].GetBoolValue() {
					t.Errorf("retry after the downstream answers: %v", resp)
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}
