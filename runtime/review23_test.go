package runtime_test

// Review r23: attacks on rows 25.27 (a call that leaves before its outcome
// is recorded) and 25.28 (every record of a reconciler batch converged).

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r23PanicErr is an error whose Error method panics (a nil pointer inside
// a real error type).
type r23PanicErr struct{ msg string }

func (e *r23PanicErr) Error() string { return e.msg } // panics on a nil *r23PanicErr

// r23Unknown makes key's record UNKNOWN (an unclassified effect error).
func r23Unknown(t *testing.T, rt *runtime.Runtime, op, key string) {
	t.Helper()
	_, err := runtime.Do(context.Background(), rt, runtime.Call[string, int]{Operation: op, Key: key, Request: key,
		Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified: UNKNOWN") }})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("%s: %v", key, err)
	}
	time.Sleep(2 * time.Millisecond) // created in this order (memstore acquires by creation)
}

// TestR23ReconcilerGiveUpErrorPanics: row 25.27 says an error whose Error
// method panics is called under recover, and row 25.28 that records given
// up are reported. A registered query that cannot tell (OutcomeUnknown)
// and returns such an error (a nil *T error) on the attempt that reaches
// ReconcileMaxAttempts makes the reconciler write the give-up note with
// `qerr.Error()` called bare (reconciler.go, converge): RunOnce panics
// (Run's goroutine, i.e. the process, dies), and the record stays UNKNOWN
// with its last attempt used, no give-up note, no EventReconcileGaveUp,
// and is never acquired again (AcquirePending skips it at MaxAttempts).
func TestR23ReconcilerGiveUpErrorPanics(t *testing.T) {
	s := memstore.New()
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R23.GiveUp"
	err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		var e *r23PanicErr // the downstream client's typed nil error
		return 0, runtime.OutcomeUnknown, e
	}, runtime.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r23Unknown(t, rt, op, "k")
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(50*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := 1; pass <= 3; pass++ {
		var st runtime.ReconcileStats
		how, v := r22Run(func() { st, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: %s (%v) %+v", pass, how, v, st)
		if how != "returned" {
			t.Errorf("pass %d: RunOnce %s (%v)", pass, how, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record: %s, attempts %d, note %q, gave-up events %d", rec.State, rec.Attempts, rec.Note, gaveUp.Load())
	if gaveUp.Load() == 0 {
		t.Errorf("the record was given up on (attempts %d of 1) and never reported: no EventReconcileGaveUp, note %q", rec.Attempts, rec.Note)
	}
}

// TestR23ReconcilerTwoGoexits: row 25.28 says every record of a batch is
// converged, the rest on the way out when one query does not return. The
// way out is one deferred pass over the rest (runOps): when a second query
// of the same batch calls runtime.Goexit too, that deferred pass is cut
// short, and every record after it stays acquired with an attempt used and
// its query never asked. With ReconcileMaxAttempts(1) they are never
// acquired again and never reported.
func TestR23ReconcilerTwoGoexits(t *testing.T) {
	s := memstore.New()
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R23.TwoGoexits"
	var mu sync.Mutex
	asked := map[string]int{}
	err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		mu.Lock()
		asked[req]++
		mu.Unlock()
		if req == "poison-1" || req == "poison-2" {
			goruntime.Goexit() // t.FailNow in a test's query, say
		}
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"poison-1", "poison-2", "good-1", "good-2"}
	for _, k := range keys {
		r23Unknown(t, rt, op, k)
	}
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(50*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := 1; pass <= 3; pass++ {
		how, v := r22Run(func() { _, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: %s (%v)", pass, how, v)
		time.Sleep(100 * time.Millisecond)
	}
	for _, k := range keys[2:] {
		rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: k})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := asked[k]
		mu.Unlock()
		if rec.State != runtime.StateSuccess {
			t.Errorf("%s: %s, attempts %d, its query asked %d times, note %q", k, rec.State, rec.Attempts, n, rec.Note)
		}
	}
	t.Logf("gave-up events: %d", gaveUp.Load())
}

// TestR23ReconcilerQueryHangs: the brief of row 25.28 (every record of a
// batch is converged even when one query hangs past its context). A
// registered query that ignores its context and does not return for a
// long time (a client without deadlines) holds its whole batch: the other
// records were acquired with it (an attempt used each) and wait behind it,
// unqueried, far past the query timeout and the reconcile lease. When the
// lease ends another reconciler acquires them again, using a second
// attempt for one query: with ReconcileMaxAttempts(1) it never acquires
// them at all, and they are never queried nor reported.
func TestR23ReconcilerQueryHangs(t *testing.T) {
	s := memstore.New()
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithQueryTimeout(100*time.Millisecond),
		runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
			if e.Kind == runtime.EventReconcileGaveUp {
				gaveUp.Add(1)
			}
		})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R23.Hang"
	unblock := make(chan struct{})
	var mu sync.Mutex
	asked := map[string]int{}
	err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		mu.Lock()
		asked[req]++
		mu.Unlock()
		if req == "hang" {
			<-unblock // ignores ctx
			return 0, runtime.OutcomeUnknown, ctx.Err()
		}
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"hang", "good-1", "good-2"}
	for _, k := range keys {
		r23Unknown(t, rt, op, k)
	}
	newRec := func(owner string) *runtime.Reconciler {
		r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1), runtime.ReconcileLease(200*time.Millisecond),
			runtime.ReconcileOwner(owner), runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = newRec("r1").RunOnce(ctx)
	}()
	defer func() { cancel(); close(unblock); <-done }()
	time.Sleep(1 * time.Second) // 10 query timeouts, 5 reconcile leases
	// A second reconciler (another process) runs meanwhile.
	st, err := newRec("r2").RunOnce(context.Background())
	t.Logf("second reconciler: %+v, %v", st, err)
	time.Sleep(200 * time.Millisecond)
	for _, k := range keys[1:] {
		rec, err := s.Get(context.Background(), runtime.Identity{Operation: op, Key: k})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := asked[k]
		mu.Unlock()
		if rec.State != runtime.StateSuccess {
			t.Errorf("%s: %s after 1.2s, attempts %d, its query asked %d times, note %q", k, rec.State, rec.Attempts, n, rec.Note)
		}
	}
	t.Logf("gave-up events: %d", gaveUp.Load())
}

// r23GoexitHandler is a slog.Handler that calls runtime.Goexit on a record
// whose message contains match (a test handler calling t.FailNow on an
// unexpected log line).
type r23GoexitHandler struct{ match string }

func (h r23GoexitHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h r23GoexitHandler) Handle(_ context.Context, r slog.Record) error {
	if h.match != "" && contains(r.Message, h.match) {
		goruntime.Goexit()
	}
	return nil
}
func (h r23GoexitHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h r23GoexitHandler) WithGroup(string) slog.Handler      { return h }

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestR23GoexitAfterClaimGranted: row 25.27 / README Observability: "A
// call that leaves before its outcome is recorded ... records UNKNOWN on
// its way out, as for an effect that panicked". Code of the caller's runs
// after the claim is granted and before execute installs its way out:
// the observer on the claim phase, on EventClaimed or EventTakeover, the
// logger on "took over an expired lease", the Query of an inline
// reconciliation after a takeover. One that calls runtime.Goexit (an
// observer or handler calling t.FailNow) leaves the record PROCESSING
// with a live lease held by a gone call: a duplicate is told
// ErrInProgress, not ErrOutcomeUnknown, for the rest of the lease, and
// nothing was recorded.
func TestR23GoexitAfterClaimGranted(t *testing.T) {
	const lease = 3 * time.Second
	type tc struct {
		name     string
		takeover bool // the record is an expired PROCESSING claim first
		obs      func(runtime.Event) bool
		logMatch string
		query    bool // the call has a Query that Goexits
		notHap   bool // the call has a Query that answers NotHappened
	}
	for _, c := range []tc{
		{name: "observer on the claim phase", obs: func(e runtime.Event) bool {
			return e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseClaim
		}},
		{name: "observer on EventClaimed", obs: func(e runtime.Event) bool { return e.Kind == runtime.EventClaimed }},
		{name: "observer on EventTakeover", takeover: true, obs: func(e runtime.Event) bool { return e.Kind == runtime.EventTakeover }},
		{name: "logger on took over", takeover: true, logMatch: "took over an expired lease"},
		{name: "query after a takeover", takeover: true, query: true},
		{name: "observer on the query phase after a takeover", takeover: true, notHap: true, obs: func(e runtime.Event) bool {
			return e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseQuery
		}},
		{name: "observer on EventReconciled (not happened) after a takeover", takeover: true, notHap: true, obs: func(e runtime.Event) bool {
			return e.Kind == runtime.EventReconciled
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memstore.New()
			opts := []runtime.Option{runtime.WithLease(lease), runtime.WithMaxWait(0)}
			if c.obs != nil {
				opts = append(opts, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
					if c.obs(e) {
						goruntime.Goexit()
					}
				})))
			}
			if c.logMatch != "" {
				opts = append(opts, runtime.WithLogger(slog.New(r23GoexitHandler{match: c.logMatch})))
			}
			rt, err := runtime.New(s, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := runtime.Identity{Operation: "R23.Claim", Key: "k"}
			var ran atomic.Int32
			call := runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
				Effect: func(context.Context, string) (int, error) { ran.Add(1); return 1, nil }}
			if c.query {
				call.Query = func(context.Context, string) (int, runtime.Outcome, error) {
					goruntime.Goexit()
					return 0, runtime.OutcomeUnknown, nil
				}
			}
			if c.notHap {
				call.Query = func(context.Context, string) (int, runtime.Outcome, error) {
					return 0, runtime.OutcomeNotHappened, nil
				}
			}
			if c.takeover {
				// A worker that died with its claim: PROCESSING, lease expired.
				fp, enc, err := runtime.EncodeRequest(rt, "req", nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: enc, Owner: "dead-worker", Lease: 20 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(40 * time.Millisecond)
			}
			how, v := r22Run(func() { _, _ = runtime.Do(ctx, rt, call) })
			if how != "goexit" {
				t.Fatalf("Do %s (%v): the hook did not run", how, v)
			}
			rec, err := s.Get(ctx, id)
			if err != nil && !errors.Is(err, runtime.ErrNotFound) { // not found: released
				t.Fatal(err)
			}
			// What a duplicate is told now (no hooks: a plain runtime).
			rt2, _ := runtime.New(s, runtime.WithLease(lease), runtime.WithMaxWait(0))
			_, dupErr := runtime.Do(ctx, rt2, runtime.Call[string, int]{Operation: id.Operation, Key: id.Key, Request: "req",
				Effect: func(context.Context, string) (int, error) { ran.Add(1); return 1, nil }})
			t.Logf("record after the call left: %s owner %q live %v; effect ran %d; duplicate: %v", rec.State, rec.Owner, rec.LeaseLive(), ran.Load(), dupErr)
			if rec.State == runtime.StateProcessing && rec.LeaseLive() && rec.Owner == rt.Owner() {
				t.Errorf("the call left (Goexit in %s) with its record PROCESSING and a live lease (%v more) held by the gone call; not recorded UNKNOWN nor released",
					c.name, rec.LeaseExpiresAt.Sub(rec.StoreNow).Round(time.Millisecond))
			}
		})
	}
}

// TestR23ReconcilerGoexitRecordNeverReported: row 25.28 ("records given up
// are reported"). A record whose query calls runtime.Goexit every time
// (t.FailNow in a test's query, or a query that always does) is acquired
// pass after pass, an attempt used each, until it reaches
// ReconcileMaxAttempts: it is then skipped for good, UNKNOWN, without the
// give-up note, EventReconcileGaveUp or the ERROR log, as if never given
// up on.
func TestR23ReconcilerGoexitRecordNeverReported(t *testing.T) {
	s := memstore.New()
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R23.GoexitAlways"
	var asked atomic.Int32
	err = runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		asked.Add(1)
		goruntime.Goexit()
		return 0, runtime.OutcomeUnknown, nil
	}, runtime.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r23Unknown(t, rt, op, "k")
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(2), runtime.ReconcileLease(30*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := 1; pass <= 5; pass++ {
		how, _ := r22Run(func() { _, _ = r.RunOnce(ctx) })
		t.Logf("pass %d: %s", pass, how)
		time.Sleep(60 * time.Millisecond)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record %s, attempts %d, query asked %d times, note %q, gave-up events %d", rec.State, rec.Attempts, asked.Load(), rec.Note, gaveUp.Load())
	if rec.State == runtime.StateUnknown && rec.Attempts >= 2 && gaveUp.Load() == 0 && rec.Note == "" {
		t.Errorf("the record used its %d attempts and is skipped for good, never reported as given up", rec.Attempts)
	}
}

// r23NilSafe is a slog.Handler whose methods work on a nil receiver (it
// then counts into a package variable).
type r23NilSafe struct{ n *atomic.Int32 }

var r23NilSafeCount atomic.Int32

func (h *r23NilSafe) Enabled(context.Context, slog.Level) bool { return true }
func (h *r23NilSafe) Handle(context.Context, slog.Record) error {
	if h == nil {
		r23NilSafeCount.Add(1)
		return nil
	}
	h.n.Add(1)
	return nil
}
func (h *r23NilSafe) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *r23NilSafe) WithGroup(string) slog.Handler      { return h }

// TestR23LoggerWrapKeepsHandler: item 3 of the brief: the runtime wraps the
// caller's handler (safeHandler); the lines it writes keep the logger's
// groups and attributes, its level (Enabled), the source of the line, the
// call's context, and a nil-safe handler still gets them.
func TestR23LoggerWrapKeepsHandler(t *testing.T) {
	var buf syncBuffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn, AddSource: true})
	l := slog.New(h).With("svc", "pay").WithGroup("g").With("inner", 1)
	rt, err := runtime.New(memstore.New(), runtime.WithLogger(l))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "tenant-1")
	_, err = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "R23.Log", Key: "k", Request: "r",
		Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified") }})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("%s", out)
	for _, want := range []string{`"svc":"pay"`, `"g":{"inner":1`, `"operation":"R23.Log"`, `do.go`, `"level":"ERROR"`} {
		if !contains(out, want) {
			t.Errorf("log output lacks %s", want)
		}
	}
	if contains(out, `"level":"INFO"`) {
		t.Errorf("an INFO line passed a WARN handler")
	}
	if contains(out, "runtime.go") {
		t.Errorf("the source of a line is the wrapper")
	}

	var n atomic.Int32
	for _, hh := range []*r23NilSafe{nil, {n: &n}} {
		rt, err := runtime.New(memstore.New(), runtime.WithLogger(slog.New(hh)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "R23.Log", Key: "k", Request: "r",
			Effect: func(context.Context, string) (int, error) { return 0, errors.New("unclassified") }})
	}
	if r23NilSafeCount.Load() == 0 || n.Load() == 0 {
		t.Errorf("nil-safe handler got %d lines (nil) and %d", r23NilSafeCount.Load(), n.Load())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// TestR23PanicNilUnderGodebug: row 25.27 names "panics with nil". The
// runtime detects an effect's panic by `recover() != nil`. Under
// GODEBUG=panicnil=1 (a setting Go supports, e.g. `//go:debug panicnil=1`
// in a program's main package), panic(nil) is recovered as nil: runEffect
// returns as if the effect had returned (zero, nil), and the call is
// recorded SUCCESS with a zero response, replayed to every duplicate,
// though the effect panicked part way (it may or may not have acted):
// the promise is UNKNOWN. Run in a child process with the setting.
func TestR23PanicNilUnderGodebug(t *testing.T) {
	if os.Getenv("R23_CHILD") == "1" {
		s := memstore.New()
		rt, err := runtime.New(s, runtime.WithRecoverPanics(true))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		resp, err := runtime.Do(ctx, rt, runtime.Call[string, int]{Operation: "R23.PanicNil", Key: "k", Request: "r",
			Effect: func(context.Context, string) (int, error) {
				panic(nil) // part way through the effect
			}})
		rec, gerr := s.Get(ctx, runtime.Identity{Operation: "R23.PanicNil", Key: "k"})
		t.Logf("Do: %v, %v; record %s %q (%v)", resp, err, rec.State, rec.Response, gerr)
		if rec.State == runtime.StateSuccess || err == nil {
			t.Errorf("an effect that panicked (with nil) was recorded %s and Do returned error %v", rec.State, err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestR23PanicNilUnderGodebug$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "R23_CHILD=1", "GODEBUG=panicnil=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Errorf("under GODEBUG=panicnil=1: %v", err)
	}
}

// r23RespCodec is JSON, except that it cannot encode an r23Resp: it
// returns a typed-nil error (whose Error method panics).
type r23RespCodec struct{ runtime.JSONCodec }

type r23Resp struct{ N int }

func (c r23RespCodec) Marshal(v any) ([]byte, error) {
	if _, ok := v.(*r23Resp); ok {
		var e *r23PanicErr
		return nil, e
	}
	if _, ok := v.(r23Resp); ok {
		var e *r23PanicErr
		return nil, e
	}
	return c.JSONCodec.Marshal(v)
}

// TestR23CodecErrorPanics: README Observability ("a panic while encoding a
// response (a MarshalJSON, a Codec): the outcome is recorded without the
// response, as for an encoding error (duplicates get ErrNotReplayable)"),
// row 25.27 (an error whose Error panics is handled). A Codec that cannot
// encode the response and returns a typed-nil error: the note is built with
// a bare merr.Error() (do.go), which panics after the effect succeeded. Do
// panics through instead of returning the response, and the record is
// UNKNOWN (the way out) instead of SUCCESS without its response: the effect
// happened, and a query or a person must now find that out.
func TestR23CodecErrorPanics(t *testing.T) {
	s := memstore.New()
	rt, err := runtime.New(s, runtime.WithCodec(r23RespCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var resp r23Resp
	var doErr error
	how, v := r22Run(func() {
		resp, doErr = runtime.Do(ctx, rt, runtime.Call[string, r23Resp]{Operation: "R23.Codec", Key: "k", Request: "r",
			Effect: func(context.Context, string) (r23Resp, error) { return r23Resp{N: 7}, nil }})
	})
	rec, _ := s.Get(ctx, runtime.Identity{Operation: "R23.Codec", Key: "k"})
	t.Logf("Do %s (%v): %v, %v; record %s omitted %v note %q", how, v, resp, doErr, rec.State, rec.ResponseOmitted, rec.Note)
	if how != "returned" || rec.State != runtime.StateSuccess {
		t.Errorf("the effect succeeded, its response's encoding failed with an error whose Error panics: Do %s, record %s", how, rec.State)
	}
}

// r23BlipStore fails the first reconciler write (a Transition by owner)
// with a transient error: a store blip, a failover.
type r23BlipStore struct {
	*memstore.Store
	owner string
	blips atomic.Int32
}

func (s *r23BlipStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if p.Owner == s.owner && s.blips.Add(1) == 1 {
		return 0, errors.New("r23: connection reset by peer")
	}
	return s.Store.Transition(ctx, p)
}

// TestR23ReconcilerLastAttemptWriteBlip: README Reconciliation ("after
// ReconcileMaxAttempts it stays UNKNOWN and is reported ..., never
// dropped"), row 25.28 (records given up are reported). The reconciler
// writes a query's answer once, unretried (converge: transitionStore, not
// RetryWrite as a call's completion is). When that write hits one
// transient store error on a record's last attempt, the record stays
// UNKNOWN with Attempts == MaxAttempts, and no reconciler acquires it
// again: the query said SUCCEEDED, and the record is neither converged nor
// reported as given up.
func TestR23ReconcilerLastAttemptWriteBlip(t *testing.T) {
	s := &r23BlipStore{Store: memstore.New(), owner: "r23-reconciler"}
	var gaveUp atomic.Int32
	rt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	const op = "R23.Blip"
	var asked atomic.Int32
	if err := runtime.Register(rt, op, func(ctx context.Context, req string) (int, runtime.Outcome, error) {
		asked.Add(1)
		return 7, runtime.OutcomeSucceeded, nil // it happened
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r23Unknown(t, rt, op, "k")
	r, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(3), runtime.ReconcileLease(30*time.Millisecond),
		runtime.ReconcileOwner("r23-reconciler"), runtime.ReconcileBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Two earlier passes found the downstream unable to tell (attempts 1
	// and 2 used): simulated by acquiring twice and leaving it UNKNOWN.
	for i := 0; i < 2; i++ {
		recs, err := s.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "other", Lease: time.Millisecond, Limit: 10, MaxAttempts: 3})
		if err != nil || len(recs) != 1 {
			t.Fatalf("acquire: %v %v", recs, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx := context.Background()
	for pass := 1; pass <= 3; pass++ {
		st, err := r.RunOnce(ctx)
		t.Logf("pass %d: %+v, %v", pass, st, err)
		time.Sleep(60 * time.Millisecond)
	}
	rec, err := s.Get(ctx, runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record %s, attempts %d, query asked %d, note %q, gave-up events %d", rec.State, rec.Attempts, asked.Load(), rec.Note, gaveUp.Load())
	// The write is retried through the blip, as a call's completion is:
	// the record converges (reported as given up, it would wait for a
	// person although the query told).
	if rec.State != runtime.StateSuccess {
		t.Errorf("the query said SUCCEEDED on the last attempt, its write hit one store blip: the record is %s (attempts %d, gave-up events %d)", rec.State, rec.Attempts, gaveUp.Load())
	}
}

// TestReconcilerObserverGoexitsTwice: the queries run on goroutines of
// their own, so code of the caller's that can still end a reconciler's
// pass is what runs on its goroutine: an observer. One that calls
// runtime.Goexit on the first two records reconciled (t.FailNow in a
// test's observer) ends the pass twice, once inside its way out: every
// other record of the batch is still converged.
func TestReconcilerObserverGoexitsTwice(t *testing.T) {
	s := memstore.New()
	var goexits atomic.Int32
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	const op = "T.ObserverGoexits"
	if err := runtime.Register(rt, op, func(context.Context, string) (int, runtime.Outcome, error) {
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		r23Unknown(t, rt, op, k)
	}
	rrt, err := runtime.New(s, runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventReconciled && goexits.Add(1) <= 2 {
			goruntime.Goexit()
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register(rrt, op, func(context.Context, string) (int, runtime.Outcome, error) {
		return 1, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := runtime.NewReconciler(rrt)
	if err != nil {
		t.Fatal(err)
	}
	how, _ := r22Run(func() { _, _ = r.RunOnce(context.Background()) })
	if how != "goexit" {
		t.Fatalf("RunOnce %s: the observer did not end the pass", how)
	}
	for _, k := range keys {
		rec, err := s.Get(context.Background(), runtime.Identity{Operation: op, Key: k})
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != runtime.StateSuccess {
			t.Errorf("%s: %s (attempts %d): left unconverged by a pass an observer ended twice", k, rec.State, rec.Attempts)
		}
	}
}
