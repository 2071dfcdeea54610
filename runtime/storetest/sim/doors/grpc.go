package doors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// grpcDoor serves idemgrpc on a loopback grpc server, one per worker
// runtime, with a hand-written service on structpb messages (no generated
// protos). Clients use the client interceptor, with the request's key set
// by idemgrpc.WithKey, and grpc's retry policy: an answer lost in transport
// (Unavailable, mLostReply) is retried by grpc with the same key.
type grpcDoor struct {
	r       *run
	servers []*grpc.Server
	conns   []*grpc.ClientConn
	lost    sync.Map // delivery id -> an answer was lost already
}

var grpcMethods = [2]string{"/simdoors.Ledger/Charge", "/simdoors.Ledger/Refund"}

const grpcRetryPolicy = `{"methodConfig":[{"name":[{"service":"simdoors.Ledger"}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

func (g *grpcDoor) setup(r *run) error {
	g.r = r
	// Charge has a query, on every worker and on the reconciler's runtime
	// (the interceptor registers it there).
	query := idemgrpc.Query(grpcMethods[0], g.query, runtime.QueryOptions{})
	_ = idemgrpc.UnaryServerInterceptor(r.rrt, query)
	for _, rt := range r.workers {
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(g.lossy,
			idemgrpc.UnaryServerInterceptor(rt, idemgrpc.Required(true), idemgrpc.Logger(slog.New(&errorLog{r: r})), query,
				idemgrpc.Scope(func(ctx context.Context) string {
					md, _ := metadata.FromIncomingContext(ctx)
					if v := md.Get("x-sim-tenant"); len(v) == 1 {
						if t, err := strconv.Atoi(v[0]); err == nil && t >= 0 && t < len(r.tenants) {
							return r.tenants[t]
						}
					}
					return r.scope
				}))))
		var methods []grpc.MethodDesc
		for route, full := range grpcMethods {
			methods = append(methods, grpc.MethodDesc{MethodName: full[len("/simdoors.Ledger/"):],
				Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
					in := &structpb.Struct{}
					if err := dec(in); err != nil {
						return nil, err
					}
					h := func(ctx context.Context, req any) (any, error) { return g.serve(ctx, route, req.(*structpb.Struct)) }
					return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
				}})
		}
		srv.RegisterService(&grpc.ServiceDesc{ServiceName: "simdoors.Ledger", HandlerType: (*any)(nil), Methods: methods}, nil)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go func() { _ = srv.Serve(lis) }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(grpcRetryPolicy), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
		if err != nil {
			return err
		}
		g.servers = append(g.servers, srv)
		g.conns = append(g.conns, conn)
	}
	return nil
}

func (g *grpcDoor) ops() [2]string { return grpcMethods }

func (g *grpcDoor) close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
	for _, s := range g.servers {
		s.Stop()
	}
}

func deliveryOf(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("x-sim-delivery") {
		n, _ := strconv.Atoi(v)
		return n
	}
	return -1
}

// lossy, outside the idempotency interceptor, loses the first successful
// answer of an mLostReply delivery, as a broken connection would.
func (g *grpcDoor) lossy(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	id := deliveryOf(ctx)
	if d := g.r.deliveryByID(id); err == nil && d != nil && d.plan.mode == mLostReply {
		if _, lost := g.lost.LoadOrStore(id, true); !lost {
			g.r.note(g.r.ident(d.req), "fault: delivery %d's answer is lost in transport (Unavailable): grpc retries", id)
			return nil, status.Error(codes.Unavailable, "connection reset (simulated)")
		}
	}
	return resp, err
}

// query is Charge's "did it happen?": the downstream's answer for the
// stored request, in the tenant the query's context names (as r.query),
// as the handler would have answered it: the receipt, or the decline's
// status.
func (g *grpcDoor) query(ctx context.Context, m proto.Message) (proto.Message, runtime.Outcome, error) {
	in, ok := m.(*structpb.Struct)
	if !ok {
		return nil, runtime.OutcomeUnknown, fmt.Errorf("the stored request is a %T", m)
	}
	req := structRequest(in)
	rc, out, err := g.r.query(0)(ctx, req)
	switch {
	case err != nil:
		return nil, out, err
	case out == runtime.OutcomeSucceeded:
		s, err := receiptStruct(rc)
		if err != nil {
			return nil, runtime.OutcomeUnknown, err
		}
		return s, out, nil
	case g.r.declinedIn(ctx, 0, req.Key):
		return nil, runtime.OutcomeFailed, declineStatus()
	}
	return nil, out, nil
}

func structRequest(in *structpb.Struct) simpay.Request {
	return simpay.Request{Key: in.Fields["key"].GetStringValue(), Amount: int64(in.Fields["amount"].GetNumberValue()), Large: in.Fields["large"].GetBoolValue()}
}

func declineStatus() error {
	st, _ := status.New(codes.PermissionDenied, "card declined").WithDetails(&errdetails.ErrorInfo{
		Domain: "psp.invalid", Reason: "DECLINED", Metadata: map[string]string{"page": failurePage()}})
	return st.Err()
}

func (g *grpcDoor) serve(ctx context.Context, route int, in *structpb.Struct) (*structpb.Struct, error) {
	rc, err := g.r.handle(ctx, route, deliveryOf(ctx), structRequest(in))
	switch {
	case err == nil:
		return receiptStruct(rc)
	case errors.Is(err, errDeclined):
		return nil, declineStatus()
	}
	return nil, err
}

func receiptStruct(rc simpay.Receipt) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"id": rc.ID, "identity": rc.Identity, "amount": float64(rc.Amount), "pad": rc.Pad})
}

// encodeSuccess is the record idemgrpc stores for a response: the message
// type's full name and its deterministic encoding.
func (g *grpcDoor) encodeSuccess(rc simpay.Receipt) ([]byte, error) {
	s, err := receiptStruct(rc)
	if err != nil {
		return nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		Type    string `json:"type"`
		Message []byte `json:"message"`
	}{string(s.ProtoReflect().Descriptor().FullName()), b})
}

func (g *grpcDoor) call(ctx context.Context, dl *delivery) answer {
	rq := dl.req
	in, _ := structpb.NewStruct(map[string]any{"key": rq.key, "amount": float64(rq.req.Amount), "large": rq.req.Large})
	ctx = idemgrpc.WithKey(ctx, rq.key)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-sim-delivery", strconv.Itoa(dl.id), "x-sim-tenant", strconv.Itoa(rq.tenant))
	out := &structpb.Struct{}
	err := g.conns[dl.plan.worker].Invoke(ctx, grpcMethods[rq.route], in, out)
	if err == nil {
		return answer{kind: ansSuccess, receipt: simpay.Receipt{ID: out.Fields["id"].GetStringValue(),
			Identity: out.Fields["identity"].GetStringValue(), Amount: int64(out.Fields["amount"].GetNumberValue())}}
	}
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.Reason
		}
	}
	a := answer{detail: st.Code().String() + " " + reason + " " + st.Message()}
	switch st.Code() {
	case codes.PermissionDenied:
		a.kind = ansFailed
	case codes.AlreadyExists:
		a.kind = ansFailed
		if reason == idemgrpc.ReasonResponseNotStored {
			a.kind = ansNotStored
		}
	case codes.Aborted, codes.Unknown, codes.Internal, codes.ResourceExhausted:
		a.kind = ansLater
	case codes.Unavailable:
		a.kind = ansLater
		if reason == idemgrpc.ReasonStoreUnavailable {
			a.kind = ansOutage
		}
	case codes.DeadlineExceeded, codes.Canceled:
		a.kind = ansLater
		// grpc-go turns a stream the server reset into DeadlineExceeded
		// once the caller's deadline passed by the clock; the context's
		// own timer can fire later than that on a loaded machine (load
		// 20: ctx.Err() still nil, 90 ms past the deadline).
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
			a.kind = ansDeadline
		}
	case codes.FailedPrecondition:
		a.kind = ansFailed
		if reason == idemgrpc.ReasonKeyReused {
			a.kind = ansKeyReused
		}
	case codes.InvalidArgument:
		a.kind = ansOther
	default:
		// Any other stable answer the interceptor gives a failed record.
		a.kind = ansFailed
	}
	return a
}
