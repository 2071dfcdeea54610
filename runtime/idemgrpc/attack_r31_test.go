package idemgrpc_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// r31NetErr is a downstream client's error that wraps a net.Error and
// answers Timeout from it; built without one (a nil interface: the classic
// way a method of an error panics), its Timeout panics. Its Error is fine,
// and it has no Is, As, Unwrap nor GRPCStatus method: grpc-go never calls
// Timeout.
type r31NetErr struct{ inner net.Error }

func (e *r31NetErr) Error() string { return "payments API: connection failed" }
func (e *r31NetErr) Timeout() bool { return e.inner.Timeout() } // panics: inner is nil

// README.md:716-718 (Observability): "an error whose Error method panics is
// recorded with a note saying so (also when its Unwrap or Is panics ...)";
// runtime.Do's Classify calls the error's methods (Timeout, Is, GRPCStatus)
// under recover: "one that panics leaves the outcome unknown" (row 25.27 of
// docs/reliability.md: "the error's methods ... are called under recover").
// And idemgrpc's package doc: a plain error is "handed to the runtime as it
// is, which ... applies its error policy, UNKNOWN by default"
// (docs/http.md:571-577: "exactly as for runtime.Do").
//
// runtime.Do, given this effect error, records UNKNOWN and returns (the
// control below). The interceptor's outcome asks runtime.Uncertain(herr)
// itself, on the effect's goroutine and outside the handler's recover
// (callRecovering covers only the handler): Timeout panics there. The
// runtime takes it for a panicking effect, records UNKNOWN and, without
// WithRecoverPanics (the default), re-raises it from the interceptor.
// grpc-go does not recover a handler's panic: the server process dies. A
// bare grpc-go server answers the same handler error Unknown (the second
// control: a real server without the interceptor).
func TestR31HandlerErrorTimeoutPanicsCrashesInterceptor(t *testing.T) {
	// Control 1: a real grpc-go server without the interceptor answers the
	// error Unknown and does not panic.
	bare := r31BareServer(t, func(ctx context.Context, req any) (any, error) { return nil, &r31NetErr{} })
	var out structpb.Struct
	bp, berr := r31Guarded(t, func() error {
		in, _ := structpb.NewStruct(map[string]any{"order": "o1"})
		return bare.Invoke(context.Background(), "/r31.S/Charge", in, &out)
	})
	t.Logf("bare grpc-go server: panic %v, status %v", bp, status.Code(berr))
	if bp != nil || status.Code(berr) != codes.Unknown {
		t.Fatalf("control: a bare grpc-go server answered %v (panic %v); want Unknown", berr, bp)
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			tenant := teststores.Unique()
			// Control 2: runtime.Do with the same effect error returns.
			doPanic, doErr := r31Guarded(t, func() error {
				_, err := runtime.Do(runtime.WithScope(context.Background(), tenant), rt, runtime.Call[string, string]{
					Operation: "r31.Do", Key: "k-do", Request: "r",
					Effect: func(context.Context, string) (string, error) { return "", &r31NetErr{} },
				})
				return err
			})
			t.Logf("runtime.Do: panic %v, err %v", doPanic, doErr)
			if doPanic != nil || !errors.Is(doErr, runtime.ErrOutcomeUnknown) {
				t.Fatalf("control: runtime.Do with an effect error whose Timeout panics: panic %v, err %v; want ErrOutcomeUnknown", doPanic, doErr)
			}

			icpt := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Scope(func(context.Context) string { return tenant }))
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-grpc"))
			req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
			info := &grpc.UnaryServerInfo{FullMethod: "/r31.S/Charge"}
			handler := func(ctx context.Context, req any) (any, error) { return nil, &r31NetErr{} }
			p, ierr := r31Guarded(t, func() error {
				_, err := icpt(ctx, req, info, handler)
				return err
			})
			t.Logf("interceptor: panic %v, err %v", p, ierr)
			if p != nil {
				t.Fatalf("the interceptor panicked (%v) for a handler error whose Timeout method panics; runtime.Do records UNKNOWN and returns for the same error (%v), a bare grpc-go server answers Unknown", p, doErr)
			}
		})
	}
}

// The gRPC side of idemhttp's TestR31NestedPlacementLosesRouteQuery: the
// interceptor chained twice on one runtime (the package doc: the inner one
// passes the call through), the method's Query given to the inner one (a
// library's interceptor chain). Query's doc: "a duplicate that finds the
// call's record UNKNOWN ... asks q instead of answering OUTCOME_UNKNOWN,
// and a reconciler on the runtime converges the method's records with it.
// The interceptor then stores each call's request message with the record".
// The outer one claims without the request and without the query: the
// duplicate of a DeadlineExceeded (UNKNOWN) gets OUTCOME_UNKNOWN, and the
// reconciler, asking the query registered on the runtime, finds no request
// stored: q is never called and the record is given up on. The inner one
// alone (the control) answers the duplicate from q.
func TestR31ChainedTwiceLosesMethodQuery(t *testing.T) {
	for _, chained := range []bool{false, true} {
		name := "inner-only"
		if chained {
			name = "chained-twice"
		}
		for _, st := range teststores.All() {
			t.Run(name+"/"+st.Name, func(t *testing.T) {
				rt, err := runtime.New(st.New(t))
				if err != nil {
					t.Fatal(err)
				}
				var asked, runs atomic.Int32
				q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
					asked.Add(1)
					out, _ := structpb.NewStruct(map[string]any{"charge": "ch_1"})
					return out, runtime.OutcomeSucceeded, nil
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/r31.S/Charge"}
				inner := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Query(info.FullMethod, q, runtime.QueryOptions{}))
				outer := idemgrpc.UnaryServerInterceptor(rt)
				handler := func(ctx context.Context, req any) (any, error) {
					runs.Add(1) // the charge went out; its answer timed out
					return nil, status.Error(codes.DeadlineExceeded, "gateway: charge timed out")
				}
				call := func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) }
				if chained {
					call = func(ctx context.Context, req any) (any, error) {
						return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
					}
				}
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-r31-chained-query"))
				req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				var errs []error
				for range 2 {
					p, err := r31Guarded(t, func() error { _, err := call(ctx, req); return err })
					if p != nil {
						t.Fatalf("panic: %v", p)
					}
					errs = append(errs, err)
				}
				rec, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1))
				if err != nil {
					t.Fatal(err)
				}
				var stats runtime.ReconcileStats
				if p, _ := r31Guarded(t, func() error { stats, err = rec.RunOnce(context.Background()); return err }); p != nil {
					t.Fatalf("panic: %v", p)
				}
				t.Logf("answers %v, handler runs %d, query asked %d, reconcile pass %+v %v", errs, runs.Load(), asked.Load(), stats, err)
				if asked.Load() == 0 || errs[1] != nil {
					t.Fatalf("the method's query was asked %d times (answers %v, reconcile pass %+v): want the duplicate of the UNKNOWN call to ask it and get its response", asked.Load(), errs, stats)
				}
			})
		}
	}
}

// r31BareServer serves one method, /r31.S/Charge on structpb messages, with
// h and no interceptor, on a loopback listener; it returns a client.
func r31BareServer(t *testing.T, h grpc.UnaryHandler) *grpc.ClientConn {
	t.Helper()
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "r31.S",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := &structpb.Struct{}
			if err := dec(in); err != nil {
				return nil, err
			}
			return h(ctx, in)
		}}},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
	})
	return conn
}

// r31Guarded runs fn, returning its panic's value if it panicked; it fails
// the test if fn does not return within 15 s.
func r31Guarded(t *testing.T, fn func() error) (p any, err error) {
	t.Helper()
	type res struct {
		p   any
		err error
	}
	done := make(chan res, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				r := recover()
				if r == nil {
					r = "panic(nil) or Goexit"
				}
				done <- res{p: r}
			}
		}()
		err := fn()
		returned = true
		done <- res{err: err}
	}()
	select {
	case r := <-done:
		return r.p, r.err
	case <-time.After(15 * time.Second):
		t.Fatal("hung for 15 s")
	}
	return nil, nil
}
