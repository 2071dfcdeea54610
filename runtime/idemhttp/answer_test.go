package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/runtime"
)

// Every error runtime.Do can return for a request that did not run the
// handler has its own answer; only a store error is a store outage.
// docs/http.md has this table.
func TestAnswerEveryRuntimeError(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("idem: POST /charges %q: %w", "k1", err) }
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, c := range []struct {
		name       string
		ctx        context.Context
		err        error
		status     int
		problem    string
		retryAfter bool
		logErr     bool // logged at ERROR
	}{
		{"ErrInvalidKey", nil, wrap(runtime.ErrInvalidKey), 400, "key-invalid", false, false},
		{"ErrKeyReused", nil, wrap(runtime.ErrKeyReused), 422, "key-reused", false, false},
		{"ErrInProgress", nil, wrap(runtime.ErrInProgress), 409, "in-progress", true, false},
		{"ErrOutcomeUnknown", nil, wrap(runtime.ErrOutcomeUnknown), 409, "outcome-unknown", true, false},
		{"ErrOutcomeUnknown of a timed-out query", nil, fmt.Errorf("%w: q: %w", runtime.ErrOutcomeUnknown, context.DeadlineExceeded), 409, "outcome-unknown", true, false},
		{"ErrLeaseLost", nil, wrap(runtime.ErrLeaseLost), 409, "in-progress", true, false},
		{"FailedError", nil, &runtime.FailedError{Operation: "POST /charges", Key: "k1", Code: "card_declined", Message: "declined"}, 422, "failed", false, false},
		{"ErrPermanent", nil, wrap(runtime.ErrPermanent), 422, "failed", false, false},
		{"ErrNotReplayable", nil, wrap(runtime.ErrNotReplayable), 410, "not-replayable", false, false},
		{"ErrTooLarge", nil, wrap(runtime.ErrTooLarge), 413, "body-too-large", false, false},
		{"unreadable record", nil, wrap(&recordError{errors.New("bad")}), 500, "record-unreadable", false, true},
		{"request's deadline passed", expired, wrap(context.DeadlineExceeded), 504, "timeout", true, false},
		{"request canceled", canceled, wrap(context.Canceled), 499, "canceled", false, false},
		{"store timed out, request alive", nil, wrap(context.DeadlineExceeded), 503, "store-unavailable", true, true},
		{"store error", nil, wrap(errors.New("dial tcp db:5432: connection refused")), 503, "store-unavailable", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := c.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			log, logs := testlog.New()
			m := &middleware{cfg: &config{logger: log, problemBase: DefaultProblemBase}}
			w := httptest.NewRecorder()
			m.answer(w, httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", nil), c.err)
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("%d %s: %v", w.Code, w.Body, err)
			}
			if w.Code != c.status || p.Status != c.status || p.Type != DefaultProblemBase+c.problem || (w.Header().Get("Retry-After") != "") != c.retryAfter {
				t.Fatalf("%d %s (Retry-After %q); want %d %s, Retry-After %v", w.Code, w.Body, w.Header().Get("Retry-After"), c.status, c.problem, c.retryAfter)
			}
			if e := logs.At(slog.LevelError); (len(e) > 0) != c.logErr {
				t.Fatalf("logged at ERROR: %q; want some: %v", e, c.logErr)
			}
			if strings.Contains(w.Body.String(), "k1") || strings.Contains(w.Body.String(), "idem:") {
				t.Fatalf("problem shows internals: %s", w.Body)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"/{id}", "/ord-1", true},
		{"/{id}", "/payments/ord-1", false},
		{"/{id}", "/", false},
		{"/payments/", "/payments/ord-1", true},
		{"/payments/", "/refunds/ord-1", false},
		{"/files/{path...}", "/files/a/b/c", true},
		{"/{$}", "/", true},
		{"/{$}", "/x", false},
		{"/charges", "/charges", true},
		{"/charges", "/charges/x", false},
		{"/a/{b}/c", "/a/x/c", true},
		{"", "/", false},
	} {
		if got := matches(c.pattern, c.path); got != c.want {
			t.Errorf("matches(%q, %q) = %v; want %v", c.pattern, c.path, got, c.want)
		}
	}
}
