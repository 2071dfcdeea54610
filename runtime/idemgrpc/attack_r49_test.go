package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/testerrs"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/memstore"
)

// README: "'Anywhere' is every error of the tree, however wide (...) or
// deep, each visited once ... One function decides (runtime.Uncertain, and
// (*Runtime).Classify for the whole rule), and runtime.Do, the HTTP and
// gRPC adapters, generated wrappers and pgstore.DoTx all follow it."
func TestR49SharedSubtreeRuntimeDo(t *testing.T) {
	herr := testerrs.SharedDAG(64, errors.New("gateway refused"))
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		_, err = runtime.Do(context.Background(), rt, runtime.Call[string, string]{Operation: "R49.Fan", Key: "k-" + teststores.Unique(), Request: "r",
			Effect: func(context.Context, string) (string, error) { return "", herr }})
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Errorf("runtime.Do: %v, want ErrOutcomeUnknown (an unmarked failure under RecordUnknown)", err)
		}
	})
}

func TestR49SharedSubtreeGRPCInterceptor(t *testing.T) {
	herr := testerrs.SharedDAG(64, errors.New("gateway refused"))
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ic := idemgrpc.UnaryServerInterceptor(rt)
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", "k-"+teststores.Unique()))
		req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
		_, err = ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/r49.S/Charge"}, func(context.Context, any) (any, error) { return nil, herr })
		if err == nil || err.Error() != herr.Error() {
			t.Errorf("the interceptor returned %v, want the handler's error", err)
		}
	})
}

// r49Loop is a query's failure error whose Unwrap runs in a cycle (a
// wrapper that points back at itself through its cause).
type r49Loop struct{ next error }

func (e *r49Loop) Error() string { return "ledger: charge refused" }
func (e *r49Loop) Unwrap() error { return e.next }

// README: "an effect's or query's error that is cyclic is flattened before
// anything else walks it: its message, and what errors.Is and errors.As
// find in it, are kept". go doc QueryFunc: "runtime.OutcomeFailed with the
// failure (a status error is replayed as that status)".
// Schedule: the first call's handler returns DeadlineExceeded (UNKNOWN);
// the duplicate's inline query answers OutcomeFailed with a cyclic error
// (no status in it).
func TestR49GRPCQueryFailedCyclic(t *testing.T) {
	loop := &r49Loop{}
	loop.next = fmt.Errorf("lookup: %w", loop)
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ic := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Query("/r49.S/Charge", func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
			return nil, runtime.OutcomeFailed, loop
		}, runtime.QueryOptions{}))
		if st := r49Duplicate(t, ic); st.Code() != codes.FailedPrecondition || st.Message() != "ledger: charge refused" {
			t.Errorf("the duplicate got %v %q, want the query's failure (FailedPrecondition, its message)", st.Code(), st.Message())
		}
	})
}

// README: "an error whose Error method panics is recorded with a note
// saying so (also when its Unwrap or Is panics ...)"; "Both adapters ...
// answer every error runtime.Do can return as what it is". docs/http.md:
// ErrOutcomeUnknown -> "Aborted OUTCOME_UNKNOWN, RetryInfo 5 s".
// Schedule: the first call times out (UNKNOWN); the duplicate's inline
// query cannot tell, with an error whose Is panics.
func TestR49GRPCQueryErrorIsPanics(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ic := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Query("/r49.S/Charge", func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
			return nil, runtime.OutcomeUnknown, &testerrs.NilIs{}
		}, runtime.QueryOptions{}))
		if st := r49Duplicate(t, ic); st.Code() != codes.Aborted || !strings.Contains(st.Message(), "may or may not have taken effect") {
			t.Errorf("the duplicate got %v %q, want Aborted OUTCOME_UNKNOWN", st.Code(), st.Message())
		}
	})
}

// r49NilStatus is a typed-nil status-carrying error from a client library.
type r49NilStatus struct{ st *status.Status }

func (e *r49NilStatus) Error() string              { return "ledger: refused" }
func (e *r49NilStatus) GRPCStatus() *status.Status { return e.st }

// Same promise as TestR49GRPCQueryErrorIsPanics; go doc QueryFunc:
// "runtime.OutcomeFailed with the failure (a status error is replayed as
// that status)". Schedule: the duplicate's query answers OutcomeFailed
// with an error whose GRPCStatus panics (a nil *r49NilStatus).
func TestR49GRPCQueryFailedStatusPanics(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		ic := idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Query("/r49.S/Charge", func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
			var e *r49NilStatus
			return nil, runtime.OutcomeFailed, e
		}, runtime.QueryOptions{}))
		if st := r49Duplicate(t, ic); st.Code() != codes.Aborted || !strings.Contains(st.Message(), "may or may not have taken effect") {
			t.Errorf("the duplicate got %v %q, want Aborted OUTCOME_UNKNOWN", st.Code(), st.Message())
		}
	})
}

// r49Duplicate calls /r49.S/Charge through ic twice with one key, the
// handler timing out (UNKNOWN), and returns the second call's status (the
// duplicate's, which the query answers); a panic of the interceptor's, which
// grpc-go does not recover (the server process dies), fails t.
func r49Duplicate(t *testing.T, ic grpc.UnaryServerInterceptor) *status.Status {
	t.Helper()
	key := "k-" + teststores.Unique()
	var st *status.Status
	for i := range 2 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("call %d: the interceptor panicked (grpc-go does not recover: the server process dies): %v\n%s", i, p, testerrs.Frames())
				}
			}()
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("idempotency-key", key))
			req, _ := structpb.NewStruct(map[string]any{"order": "o1"})
			_, err := ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/r49.S/Charge"}, func(context.Context, any) (any, error) {
				return nil, status.Error(codes.DeadlineExceeded, "gateway timed out")
			})
			st, _ = status.FromError(err)
		}()
	}
	return st
}
