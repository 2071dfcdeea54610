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

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

func r47Call(t *testing.T, ic grpc.UnaryServerInterceptor, key string, h grpc.UnaryHandler) (any, error) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
	req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
	return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/r47.S/Charge"}, h)
}

// docs/http.md: "a failure status the interceptor records as FAILED is the
// call's answer only once recorded. When that write fails ..., the caller
// gets Unavailable STORE_UNAVAILABLE".
func TestR47FailedWriteDownAnswers(t *testing.T) {
	errs := map[string]error{
		"status":           status.Error(codes.InvalidArgument, "bad card"),
		"permanent status": runtime.Permanent(status.Error(codes.Unavailable, "gateway says no")),
		"permanent plain":  runtime.Permanent(errors.New("declined")),
		"wrapped ErrPerm":  errors.Join(errors.New("x"), runtime.ErrPermanent),
	}
	for name, herr := range errs {
		t.Run(name, func(t *testing.T) {
			down := &teststores.OutcomeDown{Store: memstore.New(), To: runtime.StateFailed}
			down.Down.Store(true)
			rt, err := runtime.New(down, runtime.WithCompletionTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ic := idemgrpc.UnaryServerInterceptor(rt)
			_, got := r47Call(t, ic, "k-"+teststores.Unique(), func(ctx context.Context, req any) (any, error) { return nil, herr })
			st, _ := status.FromError(got)
			t.Logf("%v: %v (refused %d)", st.Code(), got, down.Failed.Load())
			if down.Failed.Load() == 0 {
				t.Skip("no FAILED write was attempted")
			}
			if st.Code() != codes.Unavailable || errors.Is(got, runtime.ErrPermanent) {
				t.Errorf("FAILED write refused: the caller got %v %v; want Unavailable STORE_UNAVAILABLE", st.Code(), got)
			}
		})
	}
}

type okStatusErr struct{}

func (okStatusErr) Error() string              { return "ok?" }
func (okStatusErr) GRPCStatus() *status.Status { return status.New(codes.OK, "") }

// A handler error whose status is OK: whatever the first caller gets, a
// duplicate must not be told success with no message.
func TestR47OKStatusErrorReplay(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	ic := idemgrpc.UnaryServerInterceptor(rt)
	key := "k-" + teststores.Unique()
	runs := 0
	h := func(ctx context.Context, req any) (any, error) { runs++; return nil, okStatusErr{} }
	r1, e1 := r47Call(t, ic, key, h)
	r2, e2 := r47Call(t, ic, key, h)
	t.Logf("first %v %v; second %v %v; runs %d", r1, e1, r2, e2, runs)
	if e2 == nil && r2 == nil && runs == 1 {
		t.Errorf("duplicate answered (nil, nil): a success with no message")
	}
}

// docs/http.md, gRPC classification, step 1: "a timeout or a cancellation
// anywhere in its tree ... or a DeadlineExceeded or Canceled status is
// handed to the runtime with its tree intact and records UNKNOWN, whatever
// its status code and the error policy: a retry never runs the handler
// again"; step 2 (marks) comes after. The handler calls a downstream
// operation through runtime.Do whose gateway call timed out
// (DeadlineExceeded status, marked Permanent by the gateway code): that
// record is UNKNOWN. The handler returns the error marked Permanent. The
// call must be UNKNOWN (Aborted OUTCOME_UNKNOWN to a duplicate); it is
// FAILED and replayed as a permanent failure.
func TestR47NestedUnknownDeadlineStatusRecordedFailed(t *testing.T) {
	for _, c := range []struct {
		pol  runtime.ErrorPolicy
		mark bool
	}{{runtime.RecordUnknown, false}, {runtime.RecordUnknown, true}, {runtime.RecordFailed, false}} {
		pol := c.pol
		t.Run(fmt.Sprintf("%v/marked=%v", pol, c.mark), func(t *testing.T) {
			store := memstore.New()
			rt, err := runtime.New(store, runtime.WithErrorPolicy(pol))
			if err != nil {
				t.Fatal(err)
			}
			ic := idemgrpc.UnaryServerInterceptor(rt)
			gw := runtime.Call[string, string]{Operation: "Gateway.Charge", Key: "g-" + teststores.Unique(), Request: "r",
				Effect: func(context.Context, string) (string, error) {
					return "", runtime.Permanent(status.Error(codes.DeadlineExceeded, "gateway: deadline exceeded"))
				}}
			key := "k-" + teststores.Unique()
			runs := 0
			h := func(ctx context.Context, req any) (any, error) {
				runs++
				_, err := runtime.Do(ctx, rt, gw)
				if !c.mark {
					return nil, err // as it is
				}
				return nil, runtime.Permanent(err)
			}
			_, e1 := r47Call(t, ic, key, h)
			_, e2 := r47Call(t, ic, key, h)
			s1, _ := status.FromError(e1)
			s2, _ := status.FromError(e2)
			rec, gerr := store.Get(context.Background(), runtime.Identity{Operation: "/r47.S/Charge", Key: key})
			t.Logf("first %v: %v\nduplicate %v: %v\nruns %d; record %s %v", s1.Code(), e1, s2.Code(), e2, runs, rec.State, gerr)
			if rec.State == runtime.StateFailed {
				t.Errorf("the call's record is FAILED")
			}
			if s2.Code() != codes.Aborted {
				t.Errorf("duplicate: %v %v; want Aborted OUTCOME_UNKNOWN (a DeadlineExceeded status is in the handler's error)", s2.Code(), e2)
			}
		})
	}
}
