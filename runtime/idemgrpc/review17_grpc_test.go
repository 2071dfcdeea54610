package idemgrpc_test

// Adversarial review of issue 17: the interceptor's handler now runs with
// the runtime's lazy effect context. The handler's gRPC machinery (header
// metadata set through the context, a deadline, the incoming metadata)
// must work through it, and exactly-once must hold on every store.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

func review17Server(t *testing.T, store runtime.Store, h func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error)) *grpc.ClientConn {
	t.Helper()
	rt, err := runtime.New(store, runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return reviewServerOn(t, rt, h)
}

// Promise: one handler run per key; every duplicate, concurrent or later,
// gets the first response and its header metadata (set by the handler
// through its context), marked replayed; a handler error status is stored
// and replayed with its code. Schedule: 6 keys x 6 concurrent duplicates on
// every store, the handler setting header metadata and reading the
// incoming metadata and its deadline through the context.
func TestReview17GRPCExactlyOnceHeaders(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			var runs sync.Map
			conn := review17Server(t, st.New(t), func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				key := md.Get("idempotency-key")[0]
				n, _ := runs.LoadOrStore(key, new(atomic.Int32))
				run := n.(*atomic.Int32).Add(1)
				if _, ok := ctx.Deadline(); !ok {
					return nil, status.Error(codes.Internal, "no deadline in the handler's context")
				}
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-charge", key)); err != nil {
					return nil, status.Errorf(codes.Internal, "SetHeader: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
				if in.Fields["decline"].GetBoolValue() {
					return nil, status.Error(codes.FailedPrecondition, "declined "+key)
				}
				return structpb.NewStruct(map[string]any{"charge": key, "run": run})
			})
			u := teststores.Unique()
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for k := range 6 {
				key := fmt.Sprintf("%s-%d", u, k)
				decline := k%3 == 2
				for range 6 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key), 10*time.Second)
						defer cancel()
						in, _ := structpb.NewStruct(map[string]any{"decline": decline})
						out := &structpb.Struct{}
						var hdr metadata.MD
						err := conn.Invoke(ctx, method, in, out, grpc.Header(&hdr))
						switch {
						case decline:
							if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "declined "+key {
								errs <- fmt.Errorf("%s: %v, want the stored FailedPrecondition", key, err)
							}
						case err != nil:
							errs <- fmt.Errorf("%s: %v", key, err)
						case out.Fields["charge"].GetStringValue() != key || out.Fields["run"].GetNumberValue() != 1:
							errs <- fmt.Errorf("%s: response %v", key, out)
						case len(hdr.Get("x-charge")) != 1 || hdr.Get("x-charge")[0] != key:
							errs <- fmt.Errorf("%s: header metadata %v", key, hdr)
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			runs.Range(func(k, v any) bool {
				if n := v.(*atomic.Int32).Load(); n != 1 {
					t.Errorf("key %v: handler ran %d times", k, n)
				}
				return true
			})
		})
	}
}
