package runtime_test

// Review r22: code of the caller's that the runtime calls between a call's
// steps must never leave a call half done: once the call has returned, or
// panicked (or Goexit-ed) through, no renewals go on for its claim and its
// record is not left PROCESSING with a live lease.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// r22Store counts renewals.
type r22Store struct {
	*memstore.Store
	renews atomic.Int64
	// maxResp, when set, refuses a transition whose response is larger
	// (as pgstore and redisstore do over their record limit).
	maxResp int
}

func (s *r22Store) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.maxResp > 0 && len(p.Response) > s.maxResp {
		return 0, runtime.ErrTooLarge
	}
	return s.Store.Transition(ctx, p)
}

// Renew counts the renewals that held the claim: one in flight when the
// call stopped its renewals (its goroutine scheduled late on a loaded
// machine) reaches the store after the call ended, and fails.
func (s *r22Store) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	t, err := s.Store.Renew(ctx, p)
	if err == nil {
		s.renews.Add(1)
	}
	return t, err
}

// r22Run runs f on a goroutine of its own and reports how it ended:
// returned, panicked (with the value) or Goexit-ed.
func r22Run(f func()) (how string, v any) {
	done := make(chan struct{})
	go func() {
		returned := false
		defer func() {
			if returned {
				how = "returned"
			} else if v = recover(); v != nil {
				how = "panicked"
			} else {
				how = "goexit"
			}
			close(done)
		}()
		f()
		returned = true
	}()
	<-done
	return how, v
}

// r22CheckNothingHalfDone checks, after the call has ended, that no
// renewal goes on for it and that its record does not stay PROCESSING
// with a live lease past the lease it was granted.
func r22CheckNothingHalfDone(t *testing.T, s *r22Store, id runtime.Identity, lease time.Duration) {
	t.Helper()
	before := s.renews.Load()
	time.Sleep(3 * lease)
	if n := s.renews.Load() - before; n > 0 {
		t.Errorf("%d renewals of the claim after the call ended (in %v)", n, 3*lease)
	}
	rec, err := s.Get(context.Background(), id)
	if errors.Is(err, runtime.ErrNotFound) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if rec.State == runtime.StateProcessing && rec.LeaseLive() {
		t.Errorf("record PROCESSING with a live lease (%v more) %v after the call ended",
			rec.LeaseExpiresAt.Sub(rec.StoreNow).Round(time.Millisecond), 3*lease)
	}
}

// r22PanicErr is an error whose Error method panics (a nil pointer inside
// a real error type).
type r22PanicErr struct{}

func (*r22PanicErr) Error() string { panic("r22PanicErr.Error") }

// r22TimeoutPanics is a net.Error-like error whose Timeout method panics.
type r22TimeoutPanics struct{}

func (r22TimeoutPanics) Error() string   { return "r22 timeout panics" }
func (r22TimeoutPanics) Timeout() bool   { panic("r22TimeoutPanics.Timeout") }
func (r22TimeoutPanics) Temporary() bool { return false }

// r22PanicHandler is a slog.Handler that panics on every record.
type r22PanicHandler struct{}

func (r22PanicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (r22PanicHandler) Handle(context.Context, slog.Record) error { panic("r22PanicHandler.Handle") }
func (h r22PanicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h r22PanicHandler) WithGroup(string) slog.Handler           { return h }

// r22CutResp is a response whose short form (Cut) panics.
type r22CutResp struct {
	Body string `json:"body"`
}

func (r *r22CutResp) Cut() r22CutResp { panic("r22CutResp.Cut") }

func TestR22CallerCodeBetweenStepsDo(t *testing.T) {
	const lease = 300 * time.Millisecond
	big := strings.Repeat("x", 2<<20) // over memstore's 1 MiB record limit
	for _, tc := range []struct {
		name    string
		opts    []runtime.Option
		effect  func(ctx context.Context, _ string) (r22CutResp, error)
		maxResp int
	}{
		{"effect calls runtime.Goexit", nil, func(ctx context.Context, _ string) (r22CutResp, error) {
			time.Sleep(lease / 2)
			goruntime.Goexit()
			return r22CutResp{}, nil
		}, 0},
		{"permanent error whose Error panics", nil, func(ctx context.Context, _ string) (r22CutResp, error) {
			time.Sleep(lease / 2)
			return r22CutResp{}, runtime.Permanent((*r22PanicErr)(nil))
		}, 0},
		{"error whose Timeout panics", nil, func(ctx context.Context, _ string) (r22CutResp, error) {
			time.Sleep(lease / 2)
			return r22CutResp{}, r22TimeoutPanics{}
		}, 0},
		{"observer panics on the effect phase, logger panics", []runtime.Option{
			runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
				if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseEffect {
					panic("observer")
				}
			})),
			runtime.WithLogger(slog.New(r22PanicHandler{})),
		}, func(ctx context.Context, _ string) (r22CutResp, error) {
			time.Sleep(lease / 2)
			return r22CutResp{Body: "ok"}, nil
		}, 0},
		{"response too large, its Cut panics", nil, func(ctx context.Context, _ string) (r22CutResp, error) {
			time.Sleep(lease / 2)
			return r22CutResp{Body: big}, nil
		}, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &r22Store{Store: memstore.New(), maxResp: tc.maxResp}
			opts := append([]runtime.Option{runtime.WithLease(lease), runtime.WithMaxWait(0)}, tc.opts...)
			rt, err := runtime.New(s, opts...)
			if err != nil {
				t.Fatal(err)
			}
			call := runtime.Call[string, r22CutResp]{Operation: "R22.Do", Key: "k", Request: "req", Effect: tc.effect}
			how, v := r22Run(func() { _, err = runtime.Do(context.Background(), rt, call) })
			t.Logf("Do %s (%v; err %v)", how, v, err)
			r22CheckNothingHalfDone(t, s, runtime.Identity{Operation: "R22.Do", Key: "k"}, lease)
		})
	}
}

// TestR22ReconcilerPoisonedBatch: a registered query answers one record
// OutcomeFailed with an error whose Error method panics (recording the
// failure encodes its message). The reconciler recovers a query's own
// panic, but not this one: RunOnce panics through with the rest of its
// batch acquired (an attempt used each) and never queried. Run again (a
// supervisor restarting the reconciler, as a process restart would), the
// poisoned record comes first again, until every other record of the batch
// has used its ReconcileMaxAttempts without its query ever being asked:
// they are left UNKNOWN, never given up on (no note, no
// EventReconcileGaveUp), never acquired again.
func TestR22ReconcilerPoisonedBatch(t *testing.T) {
	for _, poison := range []string{"error whose Error panics", "query calls runtime.Goexit"} {
		t.Run(poison, func(t *testing.T) { r22ReconcilerPoisonedBatch(t, poison) })
	}
}

func r22ReconcilerPoisonedBatch(t *testing.T, poison string) {
	s := &r22Store{Store: memstore.New()}
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R22.Rec"
	asked := map[string]int{}
	err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		asked[req]++
		if req == "poison" && poison == "query calls runtime.Goexit" {
			goruntime.Goexit()
		}
		if req == "poison" {
			return 0, runtime.OutcomeFailed, runtime.Permanent((*r22PanicErr)(nil))
		}
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"poison", "good-1", "good-2", "good-3"}
	for _, k := range keys {
		_, err := runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: op, Key: k, Request: k,
			Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified: UNKNOWN") }})
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatalf("%s: %v", k, err)
		}
		time.Sleep(2 * time.Millisecond) // created in this order
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(2), runtime.ReconcileLease(50*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 4; pass++ {
		how, v := r22Run(func() { _, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: %s (%v)", pass, how, v)
		time.Sleep(100 * time.Millisecond)
	}
	for _, k := range keys[1:] {
		rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: k})
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != runtime.StateSuccess {
			t.Errorf("%s: %s after %d attempts, its query asked %d times, note %q", k, rec.State, rec.Attempts, asked[k], rec.Note)
		}
	}
	t.Logf("gave-up events: %d", gaveUp.Load())
}

// TestR22HTTPHandlerGoexit: F1 through idemhttp: a handler that calls
// runtime.Goexit (t.FailNow in a test server's handler) left the key's
// record renewed for ever: every retry was 409 in flight, for good. The
// call now records UNKNOWN on its way out (the handler may have acted), so
// a retry is told the outcome is unknown, and nothing renews the claim.
func TestR22HTTPHandlerGoexit(t *testing.T) {
	const lease = 300 * time.Millisecond
	s := &r22Store{Store: memstore.New()}
	rt, err := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	goexit := true
	h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if goexit {
			time.Sleep(lease / 2)
			goruntime.Goexit()
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "http://a.example/pay", strings.NewReader(`{"n":1}`))
		req.Header.Set("Idempotency-Key", "k1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	how, _ := r22Run(func() { send() })
	t.Logf("first request: %s", how)
	goexit = false
	before := s.renews.Load()
	time.Sleep(3 * lease)
	rec := send()
	t.Logf("retry after %v: %d %s; renewals meanwhile %d", 3*lease, rec.Code, strings.TrimSpace(rec.Body.String()), s.renews.Load()-before)
	if rec.Code == http.StatusConflict && strings.Contains(rec.Body.String(), "#in-progress") {
		t.Errorf("retry %v after the handler was gone: 409 in progress (the claim's lease is still renewed)", 3*lease)
	}
	if n := s.renews.Load() - before; n != 0 {
		t.Errorf("%d renewals after the handler was gone", n)
	}
}

// r22FlakyRenew fails its first renewal (a store blip), then renews.
type r22FlakyRenew struct {
	*memstore.Store
	failed atomic.Bool
}

func (s *r22FlakyRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.failed.CompareAndSwap(false, true) {
		return time.Time{}, errors.New("r22: connection reset")
	}
	return s.Store.Renew(ctx, p)
}

// TestR22LoggerPanicInRenewals: the renewals run on the runtime's own
// goroutines and log a failed renewal ("renewing lease failed; retrying")
// through the runtime's logger. A slog.Handler that panics there is not
// recovered: the whole process dies in the middle of the call (its effect
// running), where the observer's panic is recovered and logged. One
// renewal's blip is enough. Run in a child process.
func TestR22LoggerPanicInRenewals(t *testing.T) {
	if os.Getenv("R22_CHILD") == "1" {
		rt, err := runtime.New(&r22FlakyRenew{Store: memstore.New()}, runtime.WithLease(300*time.Millisecond),
			runtime.WithLogger(slog.New(r22PanicHandler{})))
		if err != nil {
			t.Fatal(err)
		}
		_, err = runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: "R22.LogRenew", Key: "k", Request: "req",
			Effect: func(ctx context.Context, _ string) (int, error) {
				time.Sleep(400 * time.Millisecond)
				return 1, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestR22LoggerPanicInRenewals$", "-test.count=1")
	cmd.Env = append(os.Environ(), "R22_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(string(out), "\n\n")
		t.Errorf("the process died while a call ran (a renewal failed once, the logger panicked): %v\n%s", err, first)
	}
}

// TestR22PanickingErrorIsRecorded: a permanent failure whose Error method
// panics is recorded FAILED, with a note of the panic for its message, and
// Do returns it (the runtime never calls its Error method unguarded); a
// duplicate is told the recorded failure.
func TestR22PanickingErrorIsRecorded(t *testing.T) {
	s := memstore.New()
	rt, err := runtime.New(s, runtime.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := runtime.Call[string, int]{Operation: "R22.PanicErr", Key: "k", Request: "r",
		Effect: func(context.Context, string) (int, error) { return 0, runtime.Permanent((*r22PanicErr)(nil)) }}
	var doErr error
	how, v := r22Run(func() { _, doErr = runtime.Do(ctx, rt, call) })
	if how != "returned" || !errors.Is(doErr, runtime.ErrPermanent) {
		t.Fatalf("Do: %s (%v), error is ErrPermanent: %v", how, v, errors.Is(doErr, runtime.ErrPermanent))
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: "R22.PanicErr", Key: "k"})
	if err != nil || rec.State != runtime.StateFailed {
		t.Fatalf("record: %+v, %v; want FAILED", rec, err)
	}
	_, dupErr := runtime.Do(ctx, rt, call)
	var fe *runtime.FailedError
	if !errors.As(dupErr, &fe) || !strings.Contains(fe.Message, "its Error method panicked") {
		t.Errorf("duplicate: %v; want the recorded failure, noting the panic", dupErr)
	}
}
