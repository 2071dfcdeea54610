package idemgrpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestNestedOuterLeaseRuleStopsInnerClaim: a per-process interceptor
// chained around the method's own, whose lease cannot be confirmed, stops
// its handler while the inner interceptor's claim is in flight. The caller
// did not cancel: it is told the call is in progress (Aborted
// IN_PROGRESS), not its own cancellation.
func TestNestedOuterLeaseRuleStopsInnerClaim(t *testing.T) {
	stalled, err := runtime.New(teststores.NoRenewals{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	slow, err := runtime.New(teststores.SlowClaims{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	outer, inner := idemgrpc.UnaryServerInterceptor(stalled), idemgrpc.UnaryServerInterceptor(slow)
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.S/Pay"}
	handler := func(ctx context.Context, req any) (any, error) { return structpb.NewStruct(nil) }
	testenv.Within(t, 15*time.Second, func() {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-"+teststores.Unique()))
		req, _ := structpb.NewStruct(map[string]any{"cents": 100})
		_, err := outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
		st := status.Convert(err)
		if r, retry := reason(err); st.Code() != codes.Aborted || r != idemgrpc.ReasonInProgress || !retry {
			t.Errorf("a call whose outer interceptor's lease rule stopped the inner one's claim: %v %q (reason %q, retry info %v), want Aborted %s with retry info",
				st.Code(), st.Message(), r, retry, idemgrpc.ReasonInProgress)
		}
	})
}
