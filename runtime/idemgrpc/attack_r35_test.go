package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
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

// TestR35InProcessCallSameMessageReleasesOuterRecord: a handler calls
// another idempotent method in-process, on the call's context, handing it
// the request message it was given (two methods of one request type: an
// order placed, then its ledger entry posted from the same message). That
// call is the handler's own, to another method; yet the outer interceptor
// takes it for its own call (the same message pointer), records nothing
// for its handler, which did its effect, and releases its key: the retry
// runs the handler again. With the inner interceptor on the outer one's own
// store and runtime too (one interceptor, chained once).
//
// docs/http.md: "This holds for the request itself only: a request the
// handler makes to another route in-process, on the request's context, is
// its own, and the outer record stays the handler's. [...] The interceptor
// chained twice does the same."
func TestR35InProcessCallSameMessageReleasesOuterRecord(t *testing.T) {
	for _, st := range teststores.All()[1:] {
		for _, placement := range []string{"other-store", "same-interceptor"} {
			t.Run(placement+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				outer := idemgrpc.UnaryServerInterceptor(rt)
				inner := outer
				if placement == "other-store" {
					other, err := runtime.New(memstore.New())
					if err != nil {
						t.Fatal(err)
					}
					inner = idemgrpc.UnaryServerInterceptor(other)
				}
				orders, ledger := &grpc.UnaryServerInfo{FullMethod: "/shop.S/PlaceOrder"}, &grpc.UnaryServerInfo{FullMethod: "/ledger.S/Post"}
				var outerRuns, innerRuns atomic.Int32
				post := func(ctx context.Context, req any) (any, error) {
					innerRuns.Add(1)
					return structpb.NewStruct(map[string]any{"entry": "e1"})
				}
				place := func(ctx context.Context, req any) (any, error) {
					outerRuns.Add(1) // the order is placed: the effect
					if _, err := inner(ctx, req, ledger, post); err != nil {
						return nil, err
					}
					return structpb.NewStruct(map[string]any{"order": "o1"})
				}
				key := "k-r35-inproc-" + teststores.Unique()
				testenv.Within(t, 15*time.Second, func() {
					for i := range 2 {
						ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
						req, _ := structpb.NewStruct(map[string]any{"item": 1})
						out, err := outer(ctx, req, orders, place)
						if s, ok := out.(*structpb.Struct); err != nil || !ok || s.Fields["order"].GetStringValue() != "o1" {
							t.Errorf("attempt %d: %v, %v", i, out, err)
						}
					}
				})
				if outerRuns.Load() != 1 || innerRuns.Load() != 1 {
					t.Errorf("the handler ran %d times and the method it calls %d, want 1 and 1", outerRuns.Load(), innerRuns.Load())
				}
			})
		}
	}
}

// TestR35CopyingInterceptorBetweenRecordsUnknown: 25.45's placement (a
// per-process interceptor outside the method's on the shared store, the
// shared one with the method's query), with an interceptor between them
// that hands on a copy of the message (one that fills in defaults or
// redacts without touching the caller's message: proto.Clone). The inner
// interceptor claims the call in the shared store as if alone, but the
// outer one never learns it: it records the handler's DeadlineExceeded as
// UNKNOWN in the per-process store, where nothing converges it, so the
// retry after the shared record converged is told OUTCOME_UNKNOWN.
//
// docs/http.md: "An inner placement on another store [...] claims the
// request in its own store as if it were alone, and its record is the
// request's: the outer one passes its answer to the client, records
// nothing for the request and releases its key [...] The interceptor
// chained twice does the same."
func TestR35CopyingInterceptorBetweenRecordsUnknown(t *testing.T) {
	for _, st := range teststores.All()[1:] { // the shared stores
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
				runs.Add(1) // the charge went out; its answer timed out
				return nil, status.Error(4 /* DeadlineExceeded */, "gateway: charge timed out")
			}
			defaults := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				return h(ctx, proto.Clone(req.(proto.Message)))
			}
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			outer := idemgrpc.UnaryServerInterceptor(local)
			key := "k-r35-copy-" + teststores.Unique()
			call := func() (any, error) {
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
				req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					return defaults(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
				})
			}
			testenv.Within(t, 15*time.Second, func() {
				if _, err := call(); status.Code(err) != 4 {
					t.Errorf("the first call: %v, want the handler's DeadlineExceeded", err)
				}
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
					t.Errorf("a retry after the record converged: %v, %v (query asked %d times), want the converged response", out, err, asked.Load())
				}
			})
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}
