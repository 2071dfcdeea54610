package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/runtime"
)

// Every error runtime.Do can return for a call that did not run the
// handler has its own answer; only a store error is a store outage.
// docs/http.md has this table.
func TestAnswerEveryRuntimeError(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("idem: /p.S/M %q: %w", "k1", err) }
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, c := range []struct {
		name   string
		ctx    context.Context
		err    error
		code   codes.Code
		reason string
		retry  bool
		logErr bool // logged at ERROR
	}{
		{"ErrInvalidKey", nil, wrap(runtime.ErrInvalidKey), codes.InvalidArgument, ReasonKeyInvalid, false, false},
		{"ErrKeyReused", nil, wrap(runtime.ErrKeyReused), codes.FailedPrecondition, ReasonKeyReused, false, false},
		{"ErrInProgress", nil, wrap(runtime.ErrInProgress), codes.Aborted, ReasonInProgress, true, false},
		{"ErrOutcomeUnknown", nil, wrap(runtime.ErrOutcomeUnknown), codes.Aborted, ReasonOutcomeUnknown, true, false},
		{"ErrOutcomeUnknown of a timed-out query", nil, fmt.Errorf("%w: q: %w", runtime.ErrOutcomeUnknown, context.DeadlineExceeded), codes.Aborted, ReasonOutcomeUnknown, true, false},
		{"ErrLeaseLost", nil, wrap(runtime.ErrLeaseLost), codes.Aborted, ReasonInProgress, true, false},
		{"FailedError", nil, &runtime.FailedError{Operation: "/p.S/M", Key: "k1", Code: "card_declined", Message: "declined"}, codes.FailedPrecondition, ReasonFailed, false, false},
		{"FailedError with a gRPC code", nil, &runtime.FailedError{Code: "NOT_FOUND", Message: "no such card"}, codes.NotFound, "", false, false},
		{"ErrPermanent", nil, wrap(runtime.ErrPermanent), codes.FailedPrecondition, ReasonFailed, false, false},
		{"ErrNotReplayable", nil, wrap(runtime.ErrNotReplayable), codes.AlreadyExists, ReasonResponseNotStored, false, false},
		{"ErrTooLarge", nil, wrap(runtime.ErrTooLarge), codes.ResourceExhausted, ReasonRequestTooLarge, false, false},
		{"unreadable record", nil, wrap(&recordError{errors.New("bad")}), codes.Internal, ReasonRecordUnreadable, false, true},
		{"caller's deadline passed", expired, wrap(context.DeadlineExceeded), codes.DeadlineExceeded, "", false, false},
		{"caller canceled", canceled, wrap(context.Canceled), codes.Canceled, "", false, false},
		{"store timed out, caller alive", nil, wrap(context.DeadlineExceeded), codes.Unavailable, ReasonStoreUnavailable, true, true},
		{"store error", nil, wrap(errors.New("dial tcp db:5432: connection refused")), codes.Unavailable, ReasonStoreUnavailable, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			log, logs := testlog.New()
			cfg := &config{logger: log}
			err := cfg.answer(ctx, "/p.S/M", c.err)
			st := status.Convert(err)
			var reason string
			var retry bool
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.ErrorInfo:
					reason = d.Reason
				case *errdetails.RetryInfo:
					retry = true
				}
			}
			if st.Code() != c.code || reason != c.reason || retry != c.retry {
				t.Fatalf("%v (reason %q, retry %v); want %v %q retry %v", err, reason, retry, c.code, c.reason, c.retry)
			}
			if e := logs.At(slog.LevelError); (len(e) > 0) != c.logErr {
				t.Fatalf("logged at ERROR: %q; want some: %v", e, c.logErr)
			}
			if strings.Contains(st.Message(), "k1") || strings.Contains(st.Message(), "idem:") {
				t.Fatalf("message shows internals: %s", st.Message())
			}
		})
	}
}
