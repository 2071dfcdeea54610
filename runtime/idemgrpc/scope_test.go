package idemgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// tenantCharges is a tenant-scoped downstream: the handler files a charge
// under its context's scope, and the method's query looks it up under the
// scope it is given.
type tenantCharges struct {
	mu      sync.Mutex
	charges map[string]*structpb.Struct
	runs    int
	seen    []string
}

func (c *tenantCharges) handler(ctx context.Context, req any) (any, error) {
	order := req.(*structpb.Struct).Fields["order"].GetStringValue()
	c.mu.Lock()
	c.runs++
	c.charges[runtime.ScopeFrom(ctx)+"\x00"+order], _ = structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", c.runs)})
	c.mu.Unlock()
	return nil, status.Error(codes.DeadlineExceeded, "the gateway timed out") // charged, the answer lost
}

func (c *tenantCharges) find(scope string, req proto.Message) (proto.Message, runtime.Outcome, error) {
	order := req.(*structpb.Struct).Fields["order"].GetStringValue()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, fmt.Sprintf("%.24q", scope))
	if ch, ok := c.charges[scope+"\x00"+order]; ok {
		return ch, runtime.OutcomeSucceeded, nil
	}
	return nil, runtime.OutcomeNotHappened, nil
}

// A method's query, inline or in a reconciler, learns the scope the
// handler saw, whole (over 255 bytes too): from its context with Query,
// and from StoredCall.Scope with QueryCall. A DeadlineExceeded whose charge
// happened is found and replayed, never charged again.
func TestQuerySeesTheHandlersScope(t *testing.T) {
	for _, st := range teststores.All() {
		for _, long := range []bool{false, true} {
			for _, reconciler := range []bool{false, true} {
				for _, explicit := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/long=%v/reconciler=%v/QueryCall=%v", st.Name, long, reconciler, explicit), func(t *testing.T) {
						store := st.New(t)
						tenant := teststores.Unique()
						if long {
							tenant = "spiffe://example.org/" + strings.Repeat("ns/payments/", 25) + tenant
						}
						c := &tenantCharges{charges: map[string]*structpb.Struct{}}
						q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
							return c.find(runtime.ScopeFrom(ctx), req)
						}
						query := idemgrpc.Query(method, q, runtime.QueryOptions{})
						if explicit {
							query = idemgrpc.QueryCall(method, func(ctx context.Context, call idemgrpc.StoredCall) (proto.Message, runtime.Outcome, error) {
								if call.Scope != runtime.ScopeFrom(ctx) || call.Method != method {
									return nil, runtime.OutcomeUnknown, fmt.Errorf("StoredCall %q %q, the context's scope %q", call.Method, call.Scope, runtime.ScopeFrom(ctx))
								}
								return c.find(call.Scope, call.Request)
							}, runtime.QueryOptions{})
						}
						interceptor := func(rt *runtime.Runtime) grpc.UnaryServerInterceptor {
							return idemgrpc.UnaryServerInterceptor(rt,
								idemgrpc.Scope(func(ctx context.Context) string {
									md, _ := metadata.FromIncomingContext(ctx)
									return md.Get("x-tenant")[0]
								}),
								query)
						}
						rt, err := runtime.New(store)
						if err != nil {
							t.Fatal(err)
						}
						serve := interceptor(rt)
						info := &grpc.UnaryServerInfo{FullMethod: method}
						call := func() (any, error) {
							ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1", "x-tenant", tenant))
							req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
							return serve(ctx, req, info, c.handler)
						}
						if _, err := call(); status.Code(err) != codes.DeadlineExceeded {
							t.Fatalf("first: %v", err)
						}
						if reconciler {
							rrt, err := runtime.New(store)
							if err != nil {
								t.Fatal(err)
							}
							interceptor(rrt) // registers the method's query on the reconciler's runtime
							r, err := runtime.NewReconciler(rrt)
							if err != nil {
								t.Fatal(err)
							}
							if st, err := r.RunOnce(context.Background()); err != nil || st.Succeeded != 1 {
								t.Fatalf("reconcile: %+v, %v; the queries saw %q", st, err, c.seen)
							}
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
}
