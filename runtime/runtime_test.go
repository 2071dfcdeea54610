package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key     string
		wantErr string
	}{
		{"a", ""},
		{"order-2026-11-30_x.y~z!#$%&'()*+,/:;<=>?@[]^`{|}", ""},
		{strings.Repeat("k", 255), ""},
		{"", "key is empty"},
		{strings.Repeat("k", 256), "key is 256 bytes, the limit is 255"},
		{"with space", "byte 4 of the key is 0x20"},
		{"tab\there", "byte 3 of the key is 0x09"},
		{"nul\x00", "byte 3 of the key is 0x00"},
		{"del\x7f", "byte 3 of the key is 0x7f"},
		{"ключ", "byte 0 of the key is 0xd0"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%.20q", tc.key), func(t *testing.T) {
			err := runtime.ValidateKey(tc.key)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateKey: %v", err)
				}
				return
			}
			if !errors.Is(err, runtime.ErrInvalidKey) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateKey error = %v, want ErrInvalidKey saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestDoRejectsBadIdentityWithoutRunning(t *testing.T) {
	rt := newRT(t, memstore.New())
	tests := []struct {
		name string
		ctx  context.Context
		op   string
		key  string
	}{
		{"empty key", context.Background(), "Op", ""},
		{"long key", context.Background(), "Op", strings.Repeat("x", 300)},
		{"empty operation", context.Background(), "", "k"},
		{"control byte in operation", context.Background(), "Op\n", "k"},
		{"long scope", runtime.WithScope(context.Background(), strings.Repeat("s", 256)), "Op", "k"},
		{"invalid UTF-8 in operation", context.Background(), "Op\xff", "k"},
		{"invalid UTF-8 in scope", runtime.WithScope(context.Background(), "t\xc3"), "Op", "k"},
		{"control byte after UTF-8 in scope", runtime.WithScope(context.Background(), "té\x00"), "Op", "k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			_, err := runtime.Do(tc.ctx, rt, runtime.Call[int, int]{Operation: tc.op, Key: tc.key,
				Effect: func(context.Context, int) (int, error) { ran = true; return 0, nil }})
			if !errors.Is(err, runtime.ErrInvalidKey) || ran {
				t.Fatalf("error = %v, ran = %v; want ErrInvalidKey without running", err, ran)
			}
		})
	}
}

type timeoutErr struct{ timeout bool }

func (e timeoutErr) Error() string   { return "net" }
func (e timeoutErr) Timeout() bool   { return e.timeout }
func (e timeoutErr) Temporary() bool { return false }

// grpcLike mimics google.golang.org/grpc/status errors without importing gRPC.
type grpcCode uint32

type grpcStatus struct{ code grpcCode }

func (s *grpcStatus) Code() grpcCode { return s.code }

type grpcErr struct{ st *grpcStatus }

func (e grpcErr) Error() string           { return "rpc error" }
func (e grpcErr) GRPCStatus() *grpcStatus { return e.st }

func TestIsTimeout(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"deadline", context.DeadlineExceeded, true},
		{"wrapped deadline", fmt.Errorf("charging: %w", context.DeadlineExceeded), true},
		{"joined deadline", errors.Join(errors.New("x"), context.DeadlineExceeded), true},
		{"os deadline", os.ErrDeadlineExceeded, true},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{true}}, true},
		{"net non-timeout", &net.OpError{Op: "dial", Err: timeoutErr{false}}, false},
		{"url timeout", &url.Error{Op: "Post", URL: "http://x", Err: timeoutErr{true}}, true},
		{"url wrapping a timeout with %w", &url.Error{Op: "Post", URL: "http://x", Err: fmt.Errorf("dial: %w", timeoutErr{true})}, true},
		{"url wrapping a deadline", &url.Error{Op: "Post", URL: "http://x", Err: fmt.Errorf("read: %w", os.ErrDeadlineExceeded)}, true},
		{"non-timeout wrapping a timeout", &net.OpError{Op: "read", Err: fmt.Errorf("tls: %w", timeoutErr{true})}, true},
		{"grpc deadline", grpcErr{&grpcStatus{4}}, true},
		{"wrapped grpc deadline", fmt.Errorf("gateway: %w", grpcErr{&grpcStatus{4}}), true},
		{"grpc unavailable", grpcErr{&grpcStatus{14}}, false},
		{"grpc nil status", grpcErr{nil}, false},
		{"canceled", context.Canceled, false},
		{"plain", errors.New("card declined"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtime.Uncertain(tc.err); got != (tc.want || errors.Is(tc.err, context.Canceled)) {
				t.Errorf("Uncertain(%v) = %v", tc.err, got)
			}
			if got := runtime.IsTimeout(tc.err); got != tc.want {
				t.Fatalf("IsTimeout(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestNewValidatesOptions(t *testing.T) {
	s := memstore.New()
	bad := map[string]runtime.Option{
		"lease":      runtime.WithLease(time.Millisecond),
		"ttl":        runtime.WithTTL(0),
		"max wait":   runtime.WithMaxWait(-time.Second),
		"owner":      runtime.WithOwner(""),
		"codec":      runtime.WithCodec(nil),
		"policy":     runtime.WithErrorPolicy(runtime.ErrorPolicy(9)),
		"completion": runtime.WithCompletionTimeout(0),
		"query":      runtime.WithQueryTimeout(-1),
		"logger":     runtime.WithLogger(nil),
	}
	for name, opt := range bad {
		if _, err := runtime.New(s, opt); err == nil {
			t.Errorf("%s: New accepted an invalid option", name)
		}
	}
	if _, err := runtime.New(nil); err == nil {
		t.Error("New accepted a nil store")
	}
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Lease() != runtime.DefaultLease || rt.TTL() != runtime.DefaultTTL || rt.MaxWait() != runtime.DefaultMaxWait || rt.Owner() == "" {
		t.Fatalf("defaults: lease %v ttl %v maxwait %v owner %q", rt.Lease(), rt.TTL(), rt.MaxWait(), rt.Owner())
	}
}

func newRT(t *testing.T, s runtime.Store, opts ...runtime.Option) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestErrorPolicy(t *testing.T) {
	plain := errors.New("gateway said 500")
	tests := []struct {
		name   string
		policy runtime.ErrorPolicy
		err    error
		want   runtime.State // "" = released
	}{
		{"default unclassified", runtime.RecordUnknown, plain, runtime.StateUnknown},
		{"failed unclassified", runtime.RecordFailed, plain, runtime.StateFailed},
		{"release unclassified", runtime.ReleaseRecord, plain, ""},
		{"permanent wins", runtime.ReleaseRecord, runtime.Permanent(plain), runtime.StateFailed},
		{"retryable wins", runtime.RecordFailed, runtime.Retryable(plain), ""},
		{"timeout always unknown", runtime.ReleaseRecord, fmt.Errorf("x: %w", context.DeadlineExceeded), runtime.StateUnknown},
		{"timeout marked permanent is still unknown", runtime.RecordFailed, runtime.Permanent(context.DeadlineExceeded), runtime.StateUnknown},
		{"timeout marked retryable is still unknown", runtime.RecordFailed, runtime.Retryable(context.DeadlineExceeded), runtime.StateUnknown},
		{"caller cancelled under RecordFailed is unknown", runtime.RecordFailed, fmt.Errorf("charging: %w", context.Canceled), runtime.StateUnknown},
		{"caller cancelled under ReleaseRecord is unknown", runtime.ReleaseRecord, fmt.Errorf("charging: %w", context.Canceled), runtime.StateUnknown},
		{"url error wrapping a timeout under RecordFailed is unknown", runtime.RecordFailed,
			&url.Error{Op: "Post", URL: "http://x", Err: fmt.Errorf("dial: %w", timeoutErr{true})}, runtime.StateUnknown},
		{"grpc Canceled status under RecordFailed is unknown", runtime.RecordFailed, grpcErr{&grpcStatus{1}}, runtime.StateUnknown},
		{"grpc Canceled status under ReleaseRecord is unknown", runtime.ReleaseRecord, fmt.Errorf("charging: %w", grpcErr{&grpcStatus{1}}), runtime.StateUnknown},
		{"grpc Canceled status marked retryable is unknown", runtime.ReleaseRecord, runtime.Retryable(grpcErr{&grpcStatus{1}}), runtime.StateUnknown},
		{"grpc Unavailable under ReleaseRecord is released", runtime.ReleaseRecord, grpcErr{&grpcStatus{14}}, ""},
		{"a timeout joined with a permanent error is unknown", runtime.RecordFailed,
			errors.Join(runtime.Permanent(errors.New("declined")), context.DeadlineExceeded), runtime.StateUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New()
			rt := newRT(t, s, runtime.WithErrorPolicy(tc.policy))
			if got := rt.Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
			_, err := runtime.Do(context.Background(), rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
				Effect: func(context.Context, int) (int, error) { return 0, tc.err }})
			if !errors.Is(err, errors.Unwrap(tc.err)) && !errors.Is(err, tc.err) {
				t.Errorf("Do error %v does not wrap the effect's error %v", err, tc.err)
			}
			rec, gerr := s.Get(context.Background(), runtime.Identity{Operation: "Op", Key: "k"})
			switch {
			case tc.want == "" && !errors.Is(gerr, runtime.ErrNotFound):
				t.Fatalf("record %+v, want released", rec)
			case tc.want != "" && rec.State != tc.want:
				t.Fatalf("record state %q (err %v), want %s", rec.State, gerr, tc.want)
			}
		})
	}
}

func TestPermanentAndRetryableNil(t *testing.T) {
	if runtime.Permanent(nil) != nil || runtime.Retryable(nil) != nil {
		t.Fatal("marking nil must stay nil")
	}
	err := runtime.Permanent(errors.New("x"))
	if !errors.Is(err, runtime.ErrPermanent) || errors.Is(runtime.Retryable(errors.New("x")), runtime.ErrPermanent) {
		t.Fatal("Permanent/Retryable classification broken")
	}
}

// The store's clock decides leases: with the memory store's clock frozen, no
// amount of application time expires a lease; moving the store's clock does.
func TestStoreClockDecidesLeases(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := memstore.New(memstore.WithClock(clock))
	ctx := context.Background()
	id := runtime.Identity{Operation: "Op", Key: "k"}
	if res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("f"), Owner: "a", Lease: 20 * time.Millisecond}); err != nil || !res.Claimed {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // application time passes; store time does not
	if res, _ := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("f"), Owner: "b", Lease: time.Second}); res.Claimed {
		t.Fatal("lease expired by the application's clock")
	}
	mu.Lock()
	now = now.Add(21 * time.Millisecond)
	mu.Unlock()
	if res, _ := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("f"), Owner: "b", Lease: time.Second}); !res.Claimed {
		t.Fatal("lease did not expire by the store's clock")
	}
}

func TestAttemptInEffectContext(t *testing.T) {
	rt := newRT(t, memstore.New())
	ctx := runtime.WithScope(context.Background(), "tenant-1")
	var got runtime.Attempt
	_, err := runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 7,
		Effect: func(ctx context.Context, _ int) (int, error) {
			got, _ = runtime.AttemptFrom(ctx)
			tok, ok1 := runtime.FencingToken(ctx)
			dk, ok2 := runtime.DownstreamKeyFrom(ctx)
			if !ok1 || !ok2 || tok != got.FencingToken || dk != got.DownstreamKey {
				t.Error("FencingToken/DownstreamKeyFrom disagree with AttemptFrom")
			}
			return 1, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.Identity{Scope: "tenant-1", Operation: "Op", Key: "k"}
	if got.ID != want || got.FencingToken != 1 || got.TakenOver || got.DownstreamKey != runtime.DownstreamKey(want) {
		t.Fatalf("attempt = %+v", got)
	}
	if runtime.DownstreamKey(want) == runtime.DownstreamKey(runtime.Identity{Scope: "tenant-2", Operation: "Op", Key: "k"}) {
		t.Fatal("downstream keys of two scopes collide")
	}
	if _, ok := runtime.AttemptFrom(context.Background()); ok {
		t.Fatal("AttemptFrom found an attempt in a bare context")
	}
}

func TestRegister(t *testing.T) {
	rt := newRT(t, memstore.New())
	q := func(context.Context, int) (int, runtime.Outcome, error) { return 0, runtime.OutcomeUnknown, nil }
	if err := runtime.Register(rt, "B.Op", q, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register(rt, "A.Op", q, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register[int, int](rt, "", q, runtime.QueryOptions{}); err == nil {
		t.Fatal("Register accepted an empty operation")
	}
	if err := runtime.Register[int, int](rt, "C.Op", nil, runtime.QueryOptions{}); err == nil {
		t.Fatal("Register accepted a nil query")
	}
	if got := strings.Join(rt.Operations(), ","); got != "A.Op,B.Op" {
		t.Fatalf("Operations() = %s", got)
	}
}

func TestCompletionRetriesTransientStoreErrors(t *testing.T) {
	s := &flakyTransitions{Store: memstore.New(), failures: 3}
	rt := newRT(t, s)
	got, err := runtime.Do(context.Background(), rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { return 42, nil }})
	if err != nil || got != 42 {
		t.Fatalf("Do = %d, %v", got, err)
	}
	rec, _ := s.Get(context.Background(), runtime.Identity{Operation: "Op", Key: "k"})
	if rec.State != runtime.StateSuccess {
		t.Fatalf("state %s after transient completion errors", rec.State)
	}
}

func TestCompletionGivesUpAfterTimeout(t *testing.T) {
	s := &flakyTransitions{Store: memstore.New(), failures: 1 << 30}
	rt := newRT(t, s, runtime.WithCompletionTimeout(100*time.Millisecond))
	got, err := runtime.Do(context.Background(), rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { return 42, nil }})
	if err == nil || got != 42 || !strings.Contains(err.Error(), "not recorded") {
		t.Fatalf("Do = %d, %v; want the response with an error saying it was not recorded", got, err)
	}
}

type flakyTransitions struct {
	runtime.Store
	mu       sync.Mutex
	failures int
}

func (f *flakyTransitions) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	f.mu.Lock()
	fail := f.failures > 0
	f.failures--
	f.mu.Unlock()
	if fail {
		return 0, errors.New("injected: connection reset")
	}
	return f.Store.Transition(ctx, p)
}

func TestLogsGoToTheCallersLogger(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	rt := newRT(t, memstore.New(), runtime.WithLogger(logger))
	_, err := runtime.Do(context.Background(), rt, runtime.Call[int, int]{Operation: "Svc.Charge", Key: "k", Request: 1,
		Effect: func(ctx context.Context, _ int) (int, error) {
			return 0, fmt.Errorf("gateway: %w", context.DeadlineExceeded)
		}})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{`"level":"ERROR"`, `outcome unknown`, `no query`, `"operation":"Svc.Charge"`, `"key":"k"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestDoRejectsBadCalls(t *testing.T) {
	rt := newRT(t, memstore.New())
	effect := func(context.Context, int) (int, error) { return 1, nil }
	tests := []struct {
		name string
		rt   *runtime.Runtime
		call runtime.Call[int, int]
		want string
	}{
		{"nil runtime", nil, runtime.Call[int, int]{Operation: "Op", Key: "k", Effect: effect}, "runtime is nil"},
		{"no effect", rt, runtime.Call[int, int]{Operation: "Op", Key: "k"}, "call has no effect"},
		{"tiny lease", rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Effect: effect, Lease: time.Nanosecond}, "lease must be at least 10ms"},
		{"negative TTL", rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Effect: effect, TTL: -time.Second}, "TTL must be at least 10ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runtime.Do(context.Background(), tc.rt, tc.call)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// While completion retries through a store outage longer than the lease,
// the lease is still renewed, so no other worker takes the record over and
// runs the effect again.
func TestLeaseRenewedWhileCompletionRetries(t *testing.T) {
	base := memstore.New()
	s := &flakyTransitions{Store: base, failures: 7} // 10+20+...+640ms = 1.27s of retries
	rt := newRT(t, s, runtime.WithLease(300*time.Millisecond))
	other := newRT(t, base, runtime.WithMaxWait(0))
	var runs atomic.Int32
	started := make(chan struct{}, 2)
	call := runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { runs.Add(1); started <- struct{}{}; return 7, nil }}
	done := make(chan error, 1)
	go func() { _, err := runtime.Do(context.Background(), rt, call); done <- err }()
	<-started // rt holds the record; its completion now fails for a while
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 {
				t.Fatalf("effect ran %d times: the record was taken over while its completion retried", runs.Load())
			}
			return
		default:
		}
		if _, err := runtime.Do(context.Background(), other, call); err != nil && !errors.Is(err, runtime.ErrInProgress) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stuckStore never grants a claim yet reports the record as free: a broken
// store must give an error, not a busy loop.
type stuckStore struct{ runtime.Store }

func (stuckStore) Claim(_ context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	now := time.Now()
	return runtime.ClaimResult{Record: runtime.Record{ID: p.ID, Fingerprint: p.Fingerprint, State: runtime.StateProcessing,
		Owner: "ghost", Version: 1, LeaseExpiresAt: now.Add(-time.Second), StoreNow: now}}, nil
}

func TestBrokenStoreDoesNotSpinForever(t *testing.T) {
	rt := newRT(t, stuckStore{memstore.New()})
	_, err := runtime.Do(context.Background(), rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { return 1, nil }})
	if err == nil || !strings.Contains(err.Error(), "neither grants nor refuses") {
		t.Fatalf("error = %v", err)
	}
}

func TestReconcilerKeepsConvergedRecordsForTheQueryTTL(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	rt := newRT(t, s)
	if _, err := runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { return 0, context.DeadlineExceeded }}); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	q := func(context.Context, int) (int, runtime.Outcome, error) { return 5, runtime.OutcomeSucceeded, nil }
	if err := runtime.Register(rt, "Op", q, runtime.QueryOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rt)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.RunOnce(ctx); err != nil || st.Succeeded != 1 {
		t.Fatalf("RunOnce = %+v, %v", st, err)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: "Op", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if d := rec.ExpiresAt.Sub(rec.UpdatedAt); d != time.Hour {
		t.Fatalf("converged record kept for %v, want the query's TTL of 1h", d)
	}
}

// FuzzValidateKey: a key is accepted exactly when it is 1 to 255 bytes of
// visible ASCII, and a refusal always wraps ErrInvalidKey.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"", "k", "order-1", "with space", "\x00", "é", strings.Repeat("x", 256)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		valid := len(key) >= 1 && len(key) <= 255
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				valid = false
			}
		}
		err := runtime.ValidateKey(key)
		if valid != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, want valid=%v", key, err, valid)
		}
		if err != nil && !errors.Is(err, runtime.ErrInvalidKey) {
			t.Fatalf("ValidateKey(%q) = %v, not ErrInvalidKey", key, err)
		}
	})
}

// cancelAfterClaim cancels the caller's context once its claim is made.
type cancelAfterClaim struct {
	runtime.Store
	cancel context.CancelFunc
}

func (s cancelAfterClaim) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	s.cancel()
	return res, err
}

func TestCallerGoneBeforeEffectReleases(t *testing.T) {
	s := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	rt := newRT(t, cancelAfterClaim{Store: s, cancel: cancel})
	ran := false
	_, err := runtime.Do(ctx, rt, runtime.Call[int, int]{Operation: "Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { ran = true; return 1, nil }})
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do on a context cancelled after the claim: %v, effect ran %v", err, ran)
	}
	if _, err := s.Get(context.Background(), runtime.Identity{Operation: "Op", Key: "k"}); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("record after a cancelled caller: %v, want it released", err)
	}
}
