// Regression tests from the fresh review of issue 29: a scope that is not
// valid UTF-8 reaches the reconciler's query whole; at any record limit a
// declined call's duplicate gets its status, or, where the store keeps not
// even the code, FailedPrecondition saying the status was not stored, and
// never "in progress" forever.

package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

const a29Method = "/a29.Payments/Charge"

type a29Charges struct {
	mu      sync.Mutex
	charges map[string]*structpb.Struct
	runs    int
	seen    []string
}

func (c *a29Charges) handler(ctx context.Context, req any) (any, error) {
	order := req.(*structpb.Struct).Fields["order"].GetStringValue()
	c.mu.Lock()
	c.runs++
	c.charges[runtime.ScopeFrom(ctx)+"\x00"+order], _ = structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", c.runs)})
	c.mu.Unlock()
	return nil, status.Error(codes.DeadlineExceeded, "the gateway timed out")
}

func (c *a29Charges) find(scope string, req proto.Message) (proto.Message, runtime.Outcome, error) {
	order := req.(*structpb.Struct).Fields["order"].GetStringValue()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fmt.Sprintf("%q", scope))
	if ch, ok := c.charges[scope+"\x00"+order]; ok {
		return ch, runtime.OutcomeSucceeded, nil
	}
	return nil, runtime.OutcomeNotHappened, nil
}

func TestReview29GRPCQueryScope(t *testing.T) {
	scopes := map[string]string{
		"digestMarkerShort": "tenant…#sha256:abc",
		"invalidUTF8Long":   "spiffe://x/" + strings.Repeat("a", 300) + "\xff\xfe",
		"invalidUTF8Short":  "t\xffx",
		"spaceShort":        "tenant one",
		"exact256":          strings.Repeat("c", 256),
		"empty":             "",
	}
	for name, tenant := range scopes {
		for _, reconciler := range []bool{false, true} {
			for _, explicit := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/rec=%v/call=%v", name, reconciler, explicit), func(t *testing.T) {
					store := memstore.New()
					c := &a29Charges{charges: map[string]*structpb.Struct{}}
					q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
						return c.find(runtime.ScopeFrom(ctx), req)
					}
					query := idemgrpc.Query(a29Method, q, runtime.QueryOptions{})
					if explicit {
						query = idemgrpc.QueryCall(a29Method, func(ctx context.Context, call idemgrpc.StoredCall) (proto.Message, runtime.Outcome, error) {
							if call.Scope != runtime.ScopeFrom(ctx) {
								return nil, runtime.OutcomeUnknown, fmt.Errorf("mismatch")
							}
							return c.find(call.Scope, call.Request)
						}, runtime.QueryOptions{})
					}
					interceptor := func(rt *runtime.Runtime) grpc.UnaryServerInterceptor {
						return idemgrpc.UnaryServerInterceptor(rt,
							idemgrpc.Scope(func(ctx context.Context) string { return tenant }), query)
					}
					rt, _ := runtime.New(store)
					serve := interceptor(rt)
					info := &grpc.UnaryServerInfo{FullMethod: a29Method}
					call := func() (any, error) {
						ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1"))
						req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
						return serve(ctx, req, info, c.handler)
					}
					if _, err := call(); status.Code(err) != codes.DeadlineExceeded {
						t.Fatalf("first: %v", err)
					}
					if reconciler {
						rrt, _ := runtime.New(store)
						interceptor(rrt)
						r, _ := runtime.NewReconciler(rrt)
						st, err := r.RunOnce(context.Background())
						t.Logf("reconcile %+v %v", st, err)
					}
					resp, err := call()
					got, _ := resp.(*structpb.Struct)
					if err != nil || got.Fields["charge"].GetStringValue() != "ch_1" || c.runs != 1 {
						t.Fatalf("retry: %v %v, handler ran %d times; the queries saw %q", got, err, c.runs, c.seen)
					}
				})
			}
		}
	}
}

type a29Limited struct {
	*memstore.Store
	limit int
}

func (s *a29Limited) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response) > s.limit {
		return 0, fmt.Errorf("limited: %w", runtime.ErrTooLarge)
	}
	return s.Store.Transition(ctx, p)
}

func TestReview29GRPCSizeRule(t *testing.T) {
	for _, limit := range []int{2, 3, 10, 30, 100, 400, 2000} {
		for _, code := range []codes.Code{codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists, codes.PermissionDenied} {
			t.Run(fmt.Sprintf("%d/%v", limit, code), func(t *testing.T) {
				rt, _ := runtime.New(&a29Limited{memstore.New(), limit})
				serve := idemgrpc.UnaryServerInterceptor(rt)
				info := &grpc.UnaryServerInfo{FullMethod: a29Method}
				runs := 0
				h := func(ctx context.Context, req any) (any, error) {
					runs++
					st := status.New(code, "declined: "+strings.Repeat("m", 3000))
					d, _ := structpb.NewStruct(map[string]any{"x": strings.Repeat("d", 3000)})
					_ = d
					return nil, st.Err()
				}
				call := func() error {
					ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1"))
					req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
					done := make(chan error, 1)
					go func() { _, err := serve(ctx, req, info, h); done <- err }()
					select {
					case err := <-done:
						return err
					case <-time.After(5 * time.Second):
						t.Fatalf("hangs")
						return nil
					}
				}
				e1 := call()
				e2 := call()
				t.Logf("first %v / dup %.200v", status.Code(e1), e2)
				if e2 == nil || runs != 1 || status.Code(e1) != code {
					t.Fatalf("dup %v runs %d", e2, runs)
				}
				if c := status.Code(e2); c != code && !(c == codes.FailedPrecondition && strings.Contains(status.Convert(e2).Message(), "not stored")) {
					t.Fatalf("dup code %v, want %v (or FailedPrecondition saying the status was not stored): %.200v", c, code, e2)
				}
			})
		}
	}
}
