package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
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

// r50St is a downstream's status error carried by value (not comparable:
// it holds a slice). The one whose B is set is a DeadlineExceeded; the one
// whose A is set is an InvalidArgument.
type r50St struct {
	A, B any
	S    []int
}

func (e r50St) Error() string { return fmt.Sprintf("r50st A=%v B=%v", e.A, e.B) }
func (e r50St) GRPCStatus() *status.Status {
	if e.B != nil {
		return status.New(codes.DeadlineExceeded, "downstream deadline exceeded")
	}
	return status.New(codes.InvalidArgument, "downstream refused")
}

// idemgrpc package doc: "an error that leaves the outcome unknown (a
// timeout or a cancellation anywhere in the error's tree, or a
// DeadlineExceeded or Canceled status: runtime.Uncertain) is handed to the
// runtime as it is and records UNKNOWN, whatever its code and the error
// policy". README: "'Anywhere' is every error of the tree ... each visited
// once". Schedule: the handler fans out to two downstreams; one refused
// (InvalidArgument), the other timed out (DeadlineExceeded); it returns
// errors.Join of both. A duplicate must not be told a final outcome.
func TestR50GRPCJoinedStatusesTakenForOne(t *testing.T) {
	joinedStatusesNotFinal(t, "r50", errors.Join(r50St{A: 1}, r50St{B: 1}))
}

// joinedStatusesNotFinal has a handler return herr, the join of a final
// status and one that timed out, twice with one key: the duplicate must not
// be replayed the final status as a FAILED outcome.
func joinedStatusesNotFinal(t *testing.T, name string, herr error) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ic := idemgrpc.UnaryServerInterceptor(rt)
		key := "k-" + name + "-" + teststores.Unique()
		req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
		runs := 0
		var errs []error
		for i := 0; i < 2; i++ {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
			_, err := ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/" + name + ".S/Charge"}, func(context.Context, any) (any, error) {
				runs++
				return nil, herr
			})
			errs = append(errs, err)
		}
		st := status.Convert(errs[1])
		t.Logf("first: %v; duplicate: %v (runs %d)", errs[0], errs[1], runs)
		if st.Code() == codes.InvalidArgument {
			t.Errorf("the duplicate was replayed a final InvalidArgument (FAILED) although a downstream of the handler timed out: %v", st)
		}
	})
}

// README: flattening keeps "what errors.Is and errors.As find", "the
// adapters' gRPC status reading included".
func TestR50GRPCFlattenedStatus(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, _ := runtime.New(memstore.New())
		shared := errors.New("shared")
		herr := errors.Join(shared, shared, status.Error(codes.InvalidArgument, "bad card"))
		ic := idemgrpc.UnaryServerInterceptor(rt)
		key := "k-r50f-" + teststores.Unique()
		req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
		var codesGot []codes.Code
		for i := 0; i < 2; i++ {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
			_, err := ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/r50.S/Flat"}, func(context.Context, any) (any, error) { return nil, herr })
			codesGot = append(codesGot, status.Code(err))
			t.Logf("answer %d: %v", i, err)
		}
		if codesGot[0] != codes.InvalidArgument || codesGot[1] != codes.InvalidArgument {
			t.Errorf("codes %v, want InvalidArgument twice", codesGot)
		}
	})
}
