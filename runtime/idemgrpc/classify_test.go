package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// A handler error that is no code the handler chose (a plain error, which
// grpc sends as Unknown; an Unknown or Internal status, which is also what
// a downstream's lost or undecodable reply becomes) is classified by the
// runtime: runtime.Retryable and runtime.Permanent are honoured, and
// otherwise the error policy decides, UNKNOWN by default. RetryableCodes
// may release Unknown and Internal statuses, never a plain error.
func TestUnclassifiedHandlerErrors(t *testing.T) {
	type want struct {
		runs   int32 // handler runs for the call and its retry
		code   codes.Code
		reason string
		retry  bool
	}
	var (
		unknown  = want{1, codes.Aborted, idemgrpc.ReasonOutcomeUnknown, true}
		failed   = want{1, codes.FailedPrecondition, idemgrpc.ReasonFailed, false}
		released = func(c codes.Code) want { return want{2, c, "", false} }
		failPol  = []runtime.Option{runtime.WithErrorPolicy(runtime.RecordFailed)}
		relPol   = []runtime.Option{runtime.WithErrorPolicy(runtime.ReleaseRecord)}
	)
	cases := []struct {
		name   string
		rtOpts []runtime.Option
		opts   []idemgrpc.Option
		mode   string
		want   want
	}{
		{"plain error", nil, nil, "plain-reset", unknown},
		{"Unknown status", nil, nil, "status-unknown", unknown},
		{"Internal status", nil, nil, "status-internal", unknown},
		{"Retryable plain error", nil, nil, "retryable-plain", released(codes.Unknown)},
		{"Permanent plain error", nil, nil, "permanent-plain", failed},
		{"plain error, RecordFailed", failPol, nil, "plain-reset", failed},
		{"plain error, ReleaseRecord", relPol, nil, "plain-reset", released(codes.Unknown)},
		{"Internal status, ReleaseRecord", relPol, nil, "status-internal", released(codes.Internal)},
		{"Internal status, listed", nil, []idemgrpc.Option{idemgrpc.RetryableCodes(codes.Internal)}, "status-internal", released(codes.Internal)},
		{"Unknown status, listed", nil, []idemgrpc.Option{idemgrpc.RetryableCodes(codes.Unknown)}, "status-unknown", released(codes.Unknown)},
		{"plain error, Unknown listed", nil, []idemgrpc.Option{idemgrpc.RetryableCodes(codes.Unknown)}, "plain-reset", unknown},
	}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					f := start(t, setup{store: store, rtOpts: c.rtOpts, opts: c.opts})
					tenant := teststores.Unique()
					ctx := context.Background()
					first := f.call(t, ctx, call{tenant: tenant, keys: []string{"unclassified"}, mode: c.mode})
					if first.err == nil {
						t.Fatal("the first call succeeded")
					}
					retry := f.call(t, ctx, call{tenant: tenant, keys: []string{"unclassified"}, mode: c.mode})
					if n := f.runs.Load(); n != c.want.runs {
						t.Fatalf("the handler ran %d times (first: %v; retry: %v); want %d", n, first.err, retry.err, c.want.runs)
					}
					wantCode(t, retry, c.want.code, c.want.reason, c.want.retry)
				})
			}
		})
	}
}
