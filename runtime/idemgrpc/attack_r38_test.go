package idemgrpc_test

import (
	"context"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestR38NestedGoexitOuterRecordsUnknown: the gRPC analog of idemhttp's
// TestR38NestedGoexitOuterRecordsUnknown. docs/http.md: "The interceptor
// chained twice does the same": an inner interceptor on another store holds
// the call's record and the outer one "records nothing for the request and
// releases its key". The handler calls runtime.Goexit after its effect: the
// inner interceptor records UNKNOWN in the shared store (converged by its
// reconciler through the method's query), and the outer, per-process one
// records UNKNOWN too, in a store with no query and no reconciler: every
// retry on that instance is Aborted OUTCOME_UNKNOWN for good.
func TestR38NestedGoexitOuterRecordsUnknown(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			shared, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/nested.S/Charge"}
			var runs, asked atomic.Int32
			q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
				asked.Add(1)
				out, _ := structpb.NewStruct(map[string]any{"charge": "ch_1"})
				return out, runtime.OutcomeSucceeded, nil
			}
			inner := idemgrpc.UnaryServerInterceptor(shared, idemgrpc.Query(info.FullMethod, q, runtime.QueryOptions{}))
			handler := func(ctx context.Context, req any) (any, error) {
				runs.Add(1) // the charge went out
				goruntime.Goexit()
				return nil, nil
			}
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			outer := idemgrpc.UnaryServerInterceptor(local)
			key := "k-r38-goexit-" + teststores.Unique()
			call := func() (any, error) {
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
				req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
			}
			testenv.Within(t, 15*time.Second, func() {
				done := make(chan struct{})
				go func() { defer close(done); call() }()
				<-done
				rec, err := runtime.NewReconciler(shared)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := rec.RunOnce(context.Background()); err != nil {
					t.Errorf("reconcile: %v", err)
				}
				out, err := call()
				if s, ok := out.(*structpb.Struct); err != nil || !ok || s.Fields["charge"].GetStringValue() != "ch_1" {
					t.Errorf("a retry on the same instance after the shared record converged: %v, %v (query asked %d times), want the converged response", out, err, asked.Load())
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}
