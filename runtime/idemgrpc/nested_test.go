package idemgrpc_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

// TestNestedInterceptorInFlightAnswerNotRecorded: the interceptor chained
// twice, a per-process one (memory store) outside one on the method's
// shared store. A retry that reaches the other instance while the first
// call still runs gets Aborted IN_PROGRESS from the inner interceptor. The
// outer one must not record that answer: not where its RetryableCodes
// leave Aborted out, not when the retry's own deadline ends while it
// waits. The retry after the first call ended gets its response.
func TestNestedInterceptorInFlightAnswerNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		outer    []idemgrpc.Option
		deadline bool // the in-flight retry's deadline ends while it waits
	}{
		{"retryable-codes-without-aborted", []idemgrpc.Option{idemgrpc.RetryableCodes(codes.Unavailable)}, false},
		{"deadline-ends-while-waiting", nil, true},
	} {
		for _, st := range teststores.All()[1:] { // the shared stores
			t.Run(tc.name+"/"+st.Name, func(t *testing.T) {
				shared, err := runtime.New(st.New(t), runtime.WithMaxWait(300*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/nested.S/Charge"}
				inner := idemgrpc.UnaryServerInterceptor(shared)
				var runs atomic.Int32
				started, release := make(chan struct{}), make(chan struct{})
				handler := func(ctx context.Context, req any) (any, error) {
					if runs.Add(1) == 1 {
						close(started)
						<-release
					}
					return structpb.NewStruct(map[string]any{"charge": "ch_1"})
				}
				instance := func() grpc.UnaryHandler { // one process of the service
					local, err := runtime.New(memstore.New(), runtime.WithMaxWait(300*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					outer := idemgrpc.UnaryServerInterceptor(local, tc.outer...)
					return func(ctx context.Context, req any) (any, error) {
						return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
					}
				}
				one, two := instance(), instance()
				key := "k-nested-inflight-" + teststores.Unique()
				req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				call := func(h grpc.UnaryHandler, timeout time.Duration) (any, error) {
					ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
					ctx, cancel := context.WithTimeout(ctx, timeout)
					defer cancel()
					return h(ctx, req)
				}
				testenv.Within(t, 15*time.Second, func() {
					first := make(chan error, 1)
					go func() { _, err := call(one, 10*time.Second); first <- err }()
					<-started
					timeout := 10 * time.Second
					if tc.deadline {
						timeout = 100 * time.Millisecond
					}
					if _, err := call(two, timeout); err == nil {
						t.Errorf("a retry while the first runs succeeded, want an error")
					} else {
						t.Logf("a retry while the first runs: %v", err)
					}
					close(release)
					if err := <-first; err != nil {
						t.Errorf("the first call: %v", err)
					}
					out, err := call(two, 10*time.Second) // the next retry, after the first ended
					if s, ok := out.(*structpb.Struct); err != nil || !ok || s.Fields["charge"].GetStringValue() != "ch_1" {
						t.Errorf("a retry after the first ended: %v, %v (%v), want its response", out, err, status.Code(err))
					}
				})
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want 1", n)
				}
			})
		}
	}
}

// TestNestedInterceptorUnknownConvergesForOuter: a per-process interceptor
// outside the method's on the shared store, which has the method's query.
// The handler times out downstream (DeadlineExceeded): the shared record is
// UNKNOWN until the shared store's reconciler converges it. The retry must
// then get the converged response: an outer interceptor that recorded the
// call UNKNOWN in its own store, where nothing converges it, answered
// OUTCOME_UNKNOWN until that store's TTL.
func TestNestedInterceptorUnknownConvergesForOuter(t *testing.T) {
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
				return nil, status.Error(codes.DeadlineExceeded, "gateway: charge timed out")
			}
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			outer := idemgrpc.UnaryServerInterceptor(local)
			call := func() (any, error) {
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-nested-unknown-"+t.Name()))
				req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				return outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
			}
			testenv.Within(t, 15*time.Second, func() {
				if _, err := call(); status.Code(err) != codes.DeadlineExceeded {
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

// TestInProcessCallKeepsOuterRecord: a handler behind the interceptor calls
// an idempotent method in-process (its own request message, on the call's
// context), behind an interceptor on another store: another method with
// the caller's key (the incoming metadata handed on) or its own, or the
// same method with another key. That inner interceptor claims its own
// call, not this one (it names it otherwise): the outer record stays the
// handler's, and a retry is replayed, never run again.
func TestInProcessCallKeepsOuterRecord(t *testing.T) {
	for _, tc := range []struct {
		name, method, key string // the handler's own call; "" key: the caller's metadata handed on
	}{
		{"another method, the same key", "/ledger.S/Post", ""},
		{"another method, another key", "/ledger.S/Post", "entry-k-in-process"},
		// A batch method that places each item through itself.
		{"the same method, another key", "/shop.S/PlaceOrder", "item-k-in-process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			other, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			outer, inner := idemgrpc.UnaryServerInterceptor(local), idemgrpc.UnaryServerInterceptor(other)
			orders, sub := &grpc.UnaryServerInfo{FullMethod: "/shop.S/PlaceOrder"}, &grpc.UnaryServerInfo{FullMethod: tc.method}
			var outerRuns, innerRuns atomic.Int32
			post := func(ctx context.Context, req any) (any, error) {
				innerRuns.Add(1)
				return structpb.NewStruct(map[string]any{"entry": "e1"})
			}
			place := func(ctx context.Context, req any) (any, error) {
				outerRuns.Add(1)
				msg, _ := structpb.NewStruct(map[string]any{"cents": 100})
				if tc.key != "" {
					ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", tc.key))
				}
				if _, err := inner(ctx, msg, sub, post); err != nil {
					return nil, err
				}
				return structpb.NewStruct(map[string]any{"order": "o1"})
			}
			testenv.Within(t, 15*time.Second, func() {
				for i := range 2 {
					ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-in-process"))
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

// TestInProcessCallOtherScopeKeepsOuterRecord: the same interceptor (one
// runtime) re-entered in-process for the same method and key in another
// scope (a platform acting for a connected account, the tenant in the
// metadata) holds another identity, not the outer call: an interceptor on
// the outer one's store never defers to it, and the retry is replayed.
func TestInProcessCallOtherScopeKeepsOuterRecord(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	tenant := func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-tenant"); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	icpt := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Scope(tenant))
	info := &grpc.UnaryServerInfo{FullMethod: "/bank.S/Transfer"}
	var platformRuns, accountRuns atomic.Int32
	var transfer grpc.UnaryHandler
	transfer = func(ctx context.Context, req any) (any, error) {
		if tenant(ctx) != "platform" {
			accountRuns.Add(1)
			return structpb.NewStruct(map[string]any{"entry": "account"})
		}
		platformRuns.Add(1)
		md, _ := metadata.FromIncomingContext(ctx)
		md = md.Copy()
		md.Set("x-tenant", "acct_1")
		if _, err := icpt(metadata.NewIncomingContext(ctx, md), req, info, transfer); err != nil {
			return nil, err
		}
		return structpb.NewStruct(map[string]any{"entry": "platform"})
	}
	testenv.Within(t, 15*time.Second, func() {
		for i := range 2 {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-scope", "x-tenant", "platform"))
			req, _ := structpb.NewStruct(map[string]any{"cents": 1})
			out, err := icpt(ctx, req, info, transfer)
			if s, ok := out.(*structpb.Struct); err != nil || !ok || s.Fields["entry"].GetStringValue() != "platform" {
				t.Errorf("attempt %d: %v, %v", i, out, err)
			}
		}
	})
	if platformRuns.Load() != 1 || accountRuns.Load() != 1 {
		t.Errorf("the platform's handler ran %d times and the account's %d, want 1 and 1", platformRuns.Load(), accountRuns.Load())
	}
}

// TestNestedInterceptorLogsNothing: two interceptors chained are a
// documented layout, and the outer one's release of a call the inner one
// claimed is the design, not a record that failed: a service that follows
// the docs must not log a warning for every call.
func TestNestedInterceptorLogsNothing(t *testing.T) {
	var logged strings.Builder
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	shared, err := runtime.New(memstore.New(), runtime.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	local, err := runtime.New(memstore.New(), runtime.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/nested.S/Charge"}
	inner := idemgrpc.UnaryServerInterceptor(shared, idemgrpc.Logger(logger))
	outer := idemgrpc.UnaryServerInterceptor(local, idemgrpc.Logger(logger))
	handler := func(ctx context.Context, req any) (any, error) {
		return structpb.NewStruct(map[string]any{"charge": "ch_1"})
	}
	req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
	for i := range 2 {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-nested-log"))
		out, err := outer(ctx, req, info, func(ctx context.Context, req any) (any, error) { return inner(ctx, req, info, handler) })
		if s, ok := out.(*structpb.Struct); err != nil || !ok || s.Fields["charge"].GetStringValue() != "ch_1" {
			t.Errorf("call %d: %v, %v", i, out, err)
		}
	}
	if logged.Len() > 0 {
		t.Errorf("logged:\n%s", logged.String())
	}
}
