package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

type r30CycleErr struct{ stop *atomic.Bool }

func (e *r30CycleErr) Error() string { return "r30: downstream reset (cyclic error)" }
func (e *r30CycleErr) Unwrap() error {
	if e.stop.Load() {
		return nil
	}
	return e
}

// docs/http.md: "a plain error (not a status ...) is handed to the runtime
// as it is, which ... applies its error policy: UNKNOWN by default, exactly
// as for runtime.Do", and the README's classification rule: every error
// of a tree is visited once, "so a cyclic Unwrap ends the walk instead of
// looping". runtime.Do classifies a plain error with a cyclic Unwrap and
// returns (pgstore TestR30DoTxCyclicUnwrapNeverReturns). The interceptor
// first calls status.FromError(herr), whose errors.As walk has no cycle
// detection: it spins on the handler's goroutine, and the call never
// returns (nothing is recorded; the claim stays PROCESSING).
// Schedule: one unary call whose handler returns the cyclic error; the
// interceptor must return within 15 s.
func TestR30CyclicHandlerErrorNeverReturns(t *testing.T) {
	st := memstore.New()
	rt, err := runtime.New(st, runtime.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	defer stop.Store(true)
	icpt := idemgrpc.UnaryServerInterceptor(rt)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1"))
	req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
	handler := func(ctx context.Context, req any) (any, error) { return nil, &r30CycleErr{&stop} }
	done := make(chan error, 1)
	go func() {
		_, err := icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/r30.S/Charge"}, handler)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("interceptor returned: %v", err)
	case <-time.After(15 * time.Second):
		rec, gerr := st.Get(context.Background(), runtime.Identity{Operation: "/r30.S/Charge", Key: "k1"})
		stop.Store(true)
		<-done
		t.Fatalf("the interceptor did not return within 15s (50 leases) for a handler's plain error with a cyclic Unwrap; runtime.Do classifies the same error at once; record %s, lease live %v (get %v)", rec.State, rec.LeaseLive(), gerr)
	}
}

// Classification across doors (brief, item 0: Retryable/Permanent nesting):
// Retryable's doc: "the record is released and a retry runs the effect
// again"; the README: Classify is the one place that decides, and "runtime.Do,
// the HTTP and gRPC adapters and generated wrappers all follow it". A handler
// that marks its status error Retryable (it knows the request never left:
// runtime.Retryable(status.Error(codes.FailedPrecondition, ...))) has it
// recorded FAILED by the interceptor, which reads the code through the
// mark (status.FromError looks through wrappers) and wraps a new
// Permanent around it; runtime.Do with the same error releases. The
// reverse, Permanent(status Unavailable), is released instead of FAILED.
// Schedule: a call whose handler returns the marked status, then a retry
// with the same key whose handler would succeed.
func TestR30MarkedStatusOverridden(t *testing.T) {
	cases := map[string]struct {
		first   func() error
		doState runtime.State
	}{
		"retryable-over-failedprecondition": {func() error {
			return runtime.Retryable(status.Error(codes.FailedPrecondition, "inventory service not reached"))
		}, ""},
		"permanent-over-unavailable": {func() error {
			return runtime.Permanent(status.Error(codes.Unavailable, "card blocked for good"))
		}, runtime.StateFailed},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			if got := rt.Classify(c.first()); got != c.doState {
				t.Fatalf("Classify: %q, want %q", got, c.doState)
			}
			icpt := idemgrpc.UnaryServerInterceptor(rt)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1"))
			req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
			var runs atomic.Int32
			handler := func(ctx context.Context, req any) (any, error) {
				if runs.Add(1) == 1 {
					return nil, c.first()
				}
				return structpb.NewStruct(map[string]any{"ok": true})
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/r30.S/Reserve"}
			_, err1 := icpt(ctx, req, info, handler)
			_, err2 := icpt(ctx, req, info, handler)
			t.Logf("first: %v; second: %v; handler runs %d", err1, err2, runs.Load())
			released := runs.Load() == 2
			if released != (c.doState == "") {
				t.Fatalf("the handler's marked error was classified against its mark: Classify says %q (released: %v), the interceptor released: %v (second call: %v)",
					c.doState, c.doState == "", released, err2)
			}
		})
	}
}

// F7's gRPC form: the interceptor chained twice on one runtime (a
// service-wide chain plus one a library adds) names the method alike in
// both; the inner one is a duplicate of the outer call in flight, answers
// Aborted IN_PROGRESS after MaxWait, which the outer one releases (a
// retryable code): every retry does the same, and the handler never runs.
func TestR30ChainedTwiceNeverRuns(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	icpt := idemgrpc.UnaryServerInterceptor(rt)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k1"))
	req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
	info := &grpc.UnaryServerInfo{FullMethod: "/r30.S/Charge"}
	var runs atomic.Int32
	handler := func(ctx context.Context, req any) (any, error) {
		runs.Add(1)
		return structpb.NewStruct(map[string]any{"ok": true})
	}
	chained := func(ctx context.Context, req any) (any, error) { return icpt(ctx, req, info, handler) }
	var errs []error
	for i := 0; i < 2; i++ {
		_, err := icpt(ctx, req, info, chained)
		errs = append(errs, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the interceptor chained twice: %v; handler runs %d, want 1", errs, runs.Load())
	}
}
