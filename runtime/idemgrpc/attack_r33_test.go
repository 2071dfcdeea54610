package idemgrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// r33NilPanicErr is a downstream client's error whose Timeout method
// panics with nil (under GODEBUG=panicnil=1, recover then returns nil).
type r33NilPanicErr struct{}

func (r33NilPanicErr) Error() string { return "payments API: connection failed" }
func (r33NilPanicErr) Timeout() bool { panic(nil) }

// README.md:730-735 (Observability): "A panic is told by the code not
// returning, not by recover's value: panic(nil) under GODEBUG=panicnil=1
// (the default of a main module whose go.mod says go 1.20 or older) is a
// panic like any other, never a return." And idemgrpc's outcome doc
// (runtime/idemgrpc/idemgrpc.go:559-562, the CHANGELOG's Unreleased
// "idemgrpc reads a handler's error under recover"): "Reading the error
// calls its methods (GRPCStatus, Timeout, Is, As): when one panics, the
// error goes to the runtime as it is, which classifies it under recover
// (UNKNOWN, with a note saying so, by default), as for runtime.Do."
//
// errorOutcome's deferred recover sets its result only when recover's
// value is not nil: a Timeout that panics with nil under panicnil=1 makes
// errorOutcome return nil, which outcome takes for a success with an
// empty response. The handler FAILED (it returned an error), and the
// record says SUCCESS: a duplicate is told the call succeeded.
func TestR33HandlerErrorPanicNilRecordedSuccess(t *testing.T) {
	testenv.SetPanicNil(t)
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithLease(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tenant := teststores.Unique()
			// Control: runtime.Do with the same effect error records UNKNOWN.
			_, doErr := r31Guarded(t, func() error {
				_, err := runtime.Do(runtime.WithScope(context.Background(), tenant), rt, runtime.Call[string, string]{
					Operation: "r33.Do", Key: "k-do", Request: "r",
					Effect: func(context.Context, string) (string, error) { return "", r33NilPanicErr{} },
				})
				return err
			})
			if !errors.Is(doErr, runtime.ErrOutcomeUnknown) {
				t.Fatalf("control: runtime.Do: %v; want ErrOutcomeUnknown", doErr)
			}

			icpt := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Scope(func(context.Context) string { return tenant }))
			info := &grpc.UnaryServerInfo{FullMethod: "/r33.S/Charge"}
			runs := 0
			handler := func(ctx context.Context, req any) (any, error) { runs++; return nil, r33NilPanicErr{} }
			call := func() (any, error) {
				var out any
				_, err := r31Guarded(t, func() error {
					ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-grpc"))
					req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
					var err error
					out, err = icpt(ctx, req, info, handler)
					return err
				})
				return out, err
			}
			_, firstErr := call()
			dupOut, dupErr := call()
			rec, gerr := rt.Store().Get(context.Background(), runtime.Identity{Scope: tenant, Operation: "/r33.S/Charge", Key: "k-grpc"})
			t.Logf("first: %v; duplicate: out %v err %v; record %v (get err %v); handler runs %d", firstErr, dupOut, dupErr, rec.State, gerr, runs)
			if gerr == nil && rec.State == runtime.StateSuccess {
				t.Errorf("the handler returned an error (whose Timeout panics with nil) and the record is SUCCESS; runtime.Do records the same error UNKNOWN (%v)", doErr)
			}
			if dupErr == nil && runs == 1 {
				t.Errorf("the duplicate of a call whose handler returned an error was answered success (%v)", dupOut)
			}
		})
	}
}
