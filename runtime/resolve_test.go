package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// resolveClock is a store clock moved by hand.
type resolveClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *resolveClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *resolveClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type resolveFixture struct {
	t     *testing.T
	clock *resolveClock
	store *memstore.Store
	id    runtime.Identity
	req   []byte
	fp    []byte
}

const resolveOp = "Payments.Charge"

func newResolveFixture(t *testing.T) *resolveFixture {
	t.Helper()
	c := &resolveClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	req, _ := json.Marshal(resolveReq{Amount: 42})
	return &resolveFixture{
		t: t, clock: c, store: memstore.New(memstore.WithClock(c.now)),
		id:  runtime.Identity{Scope: "tenant-1", Operation: resolveOp, Key: "k-1"},
		req: req, fp: runtime.Fingerprint(req),
	}
}

type resolveReq struct {
	Amount int `json:"amount"`
}

type resolveResp struct {
	ChargeID string `json:"charge_id"`
}

// processing claims the record as a worker would, with lease.
func (f *resolveFixture) processing(owner string, lease time.Duration) runtime.Record {
	f.t.Helper()
	res, err := f.store.Claim(context.Background(), runtime.ClaimParams{ID: f.id, Fingerprint: f.fp, Request: f.req, Owner: owner, Lease: lease})
	if err != nil || !res.Claimed {
		f.t.Fatalf("claim: %+v, %v", res, err)
	}
	return res.Record
}

// unknown makes the record UNKNOWN with a free lease, as a timed-out call.
func (f *resolveFixture) unknown() runtime.Record {
	f.t.Helper()
	rec := f.processing("worker-1", time.Minute)
	if _, err := f.store.Transition(context.Background(), runtime.TransitionParams{
		ID: f.id, From: runtime.StateProcessing, Owner: "worker-1", Version: rec.Version, To: runtime.StateUnknown, Token: "w1#1",
	}); err != nil {
		f.t.Fatal(err)
	}
	return f.get()
}

func (f *resolveFixture) get() runtime.Record {
	f.t.Helper()
	rec, err := f.store.Get(context.Background(), f.id)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

func (f *resolveFixture) resolution(to runtime.ResolveTo) runtime.Resolution {
	r := runtime.Resolution{ID: f.id, To: to, Reason: "checked the gateway: charge ch_1 exists", Owner: "idemctl:alice@ops"}
	switch to {
	case runtime.ResolveSuccess:
		r.Response = []byte(`{"charge_id":"ch_1"}`)
	case runtime.ResolveFailed:
		r.Failure = resolveCodeErr{code: "card_declined", msg: "declined at the gateway"}
	}
	return r
}

type resolveCodeErr struct{ code, msg string }

func (e resolveCodeErr) Error() string     { return e.msg }
func (e resolveCodeErr) ErrorCode() string { return e.code }

// retry runs the call again through runtime.Do on the fixture's store and
// reports whether the effect ran.
func (f *resolveFixture) retry() (resolveResp, bool, error) {
	f.t.Helper()
	rt, err := runtime.New(f.store, runtime.WithOwner("retrier"))
	if err != nil {
		f.t.Fatal(err)
	}
	ran := false
	resp, err := runtime.Do(runtime.WithScope(context.Background(), f.id.Scope), rt, runtime.Call[resolveReq, resolveResp]{
		Operation: f.id.Operation, Key: f.id.Key, Request: resolveReq{Amount: 42},
		Effect: func(context.Context, resolveReq) (resolveResp, error) {
			ran = true
			return resolveResp{ChargeID: "ch_again"}, nil
		},
	})
	return resp, ran, err
}

func TestResolveRejectsInvalidResolutions(t *testing.T) {
	f := newResolveFixture(t)
	f.unknown()
	before := f.get()
	mod := func(to runtime.ResolveTo, m func(*runtime.Resolution)) runtime.Resolution {
		r := f.resolution(to)
		m(&r)
		return r
	}
	tests := []struct {
		name string
		r    runtime.Resolution
		want string
	}{
		{"no reason", mod(runtime.ResolveSuccess, func(r *runtime.Resolution) { r.Reason = "" }), "a reason is required"},
		{"blank reason", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.Reason = " \t\n" }), "a reason is required"},
		{"long reason", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.Reason = strings.Repeat("x", 1025) }), "the limit is 1024"},
		{"no owner", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.Owner = "" }), "owner (who resolves)"},
		{"unknown target", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.To = "deleted" }), `unknown resolution "deleted"`},
		{"no target", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.To = "" }), `unknown resolution ""`},
		{"success without response", mod(runtime.ResolveSuccess, func(r *runtime.Resolution) { r.Response = nil }), "success needs the response"},
		{"success with failure", mod(runtime.ResolveSuccess, func(r *runtime.Resolution) { r.Failure = errors.New("x") }), "success takes no failure"},
		{"failed without failure", mod(runtime.ResolveFailed, func(r *runtime.Resolution) { r.Failure = nil }), "failed needs the failure"},
		{"failed with response", mod(runtime.ResolveFailed, func(r *runtime.Resolution) { r.Response = []byte("{}") }), "failed takes no response"},
		{"released with response", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.Response = []byte("{}") }), "released takes neither"},
		{"negative TTL", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.TTL = -time.Second }), "TTL must not be negative"},
		{"bad key", mod(runtime.ResolveReleased, func(r *runtime.Resolution) { r.ID.Key = "a b" }), "invalid idempotency key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runtime.Resolve(context.Background(), f.store, tc.r)
			if !errors.Is(err, runtime.ErrInvalidResolution) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrInvalidResolution saying %q", err, tc.want)
			}
			if errors.Is(err, runtime.ErrNotResolvable) {
				t.Fatalf("an invalid resolution is not a refusal: %v", err)
			}
		})
	}
	if after := f.get(); after.Version != before.Version {
		t.Fatalf("an invalid resolution changed the record: version %d -> %d", before.Version, after.Version)
	}
	if _, err := runtime.Resolve(context.Background(), nil, f.resolution(runtime.ResolveReleased)); !errors.Is(err, runtime.ErrInvalidResolution) {
		t.Fatalf("nil store: %v", err)
	}
}

func TestParseResolveTo(t *testing.T) {
	for in, want := range map[string]runtime.ResolveTo{"success": runtime.ResolveSuccess, "FAILED": runtime.ResolveFailed, " released ": runtime.ResolveReleased} {
		if got, err := runtime.ParseResolveTo(in); err != nil || got != want {
			t.Errorf("ParseResolveTo(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "release", "ok", "unknown"} {
		if _, err := runtime.ParseResolveTo(in); !errors.Is(err, runtime.ErrInvalidResolution) {
			t.Errorf("ParseResolveTo(%q) error = %v", in, err)
		}
	}
}

func TestResolveRefuses(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *resolveFixture) (version int64)
		also    error  // another sentinel the refusal wraps
		mention string // in the message
	}{
		{"absent", func(f *resolveFixture) int64 { return 0 }, runtime.ErrNotFound, "no such record"},
		{"success", func(f *resolveFixture) int64 {
			rec := f.processing("worker-1", time.Minute)
			_, err := f.store.Transition(context.Background(), runtime.TransitionParams{ID: f.id, From: runtime.StateProcessing, Owner: "worker-1",
				Version: rec.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(`{"charge_id":"ch_0"}`)})
			if err != nil {
				f.t.Fatal(err)
			}
			return 0
		}, nil, "is SUCCESS already"},
		{"failed", func(f *resolveFixture) int64 {
			rec := f.processing("worker-1", time.Minute)
			_, err := f.store.Transition(context.Background(), runtime.TransitionParams{ID: f.id, From: runtime.StateProcessing, Owner: "worker-1",
				Version: rec.Version, To: runtime.StateFailed, TTL: time.Hour, Response: runtime.EncodeFailure(errors.New("no"))})
			if err != nil {
				f.t.Fatal(err)
			}
			return 0
		}, nil, "is FAILED already"},
		{"processing with a live lease", func(f *resolveFixture) int64 {
			f.processing("worker-1", time.Minute)
			f.clock.add(20 * time.Second)
			return 0
		}, runtime.ErrInProgress, `held by a worker (owner "worker-1"`},
		{"unknown being reconciled", func(f *resolveFixture) int64 {
			f.unknown()
			if recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "host/1/reconciler", Lease: time.Minute, Limit: 10}); err != nil || len(recs) != 1 {
				f.t.Fatalf("acquire: %v, %v", recs, err)
			}
			return 0
		}, runtime.ErrInProgress, `held by a reconciler (or a worker converging it) (owner "host/1/reconciler"`},
		{"version moved on", func(f *resolveFixture) int64 {
			rec := f.unknown()
			return rec.Version - 1
		}, nil, "it changed since it was looked at"},
	}
	for _, to := range []runtime.ResolveTo{runtime.ResolveSuccess, runtime.ResolveFailed, runtime.ResolveReleased} {
		for _, tc := range tests {
			t.Run(string(to)+"/"+tc.name, func(t *testing.T) {
				f := newResolveFixture(t)
				version := tc.setup(f)
				before, beforeErr := f.store.Get(context.Background(), f.id)
				var log bytes.Buffer
				r := f.resolution(to)
				r.Version, r.Logger = version, slog.New(slog.NewJSONHandler(&log, nil))
				_, err := runtime.Resolve(context.Background(), f.store, r)
				if !errors.Is(err, runtime.ErrNotResolvable) || (tc.also != nil && !errors.Is(err, tc.also)) || !strings.Contains(err.Error(), tc.mention) {
					t.Fatalf("error = %v, want ErrNotResolvable (and %v) saying %q", err, tc.also, tc.mention)
				}
				after, afterErr := f.store.Get(context.Background(), f.id)
				if !errors.Is(afterErr, beforeErr) || after.Version != before.Version || after.State != before.State || after.Owner != before.Owner {
					t.Fatalf("a refusal changed the record: %+v (%v) -> %+v (%v)", before, beforeErr, after, afterErr)
				}
				if !strings.Contains(log.String(), `"msg":"idem: resolution refused; nothing changed"`) || !strings.Contains(log.String(), `"who":"idemctl:alice@ops"`) {
					t.Fatalf("refusal not logged: %s", log.String())
				}
			})
		}
	}
}

func TestResolveResolves(t *testing.T) {
	setups := []struct {
		name  string
		setup func(f *resolveFixture)
	}{
		{"unknown", func(f *resolveFixture) { f.unknown() }},
		{"unknown given up", func(f *resolveFixture) {
			f.unknown()
			for range 3 { // a reconciler that never gets an answer
				recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 1, MaxAttempts: 3})
				if err != nil || len(recs) != 1 {
					f.t.Fatalf("acquire: %v, %v", recs, err)
				}
				if _, err := f.store.Transition(context.Background(), runtime.TransitionParams{ID: f.id, From: runtime.StateUnknown, Owner: "rec",
					Version: recs[0].Version, To: runtime.StateUnknown, Lease: time.Second, Note: "reconcile gave up"}); err != nil {
					f.t.Fatal(err)
				}
				f.clock.add(2 * time.Second)
			}
			if rec := f.get(); rec.Attempts != 3 {
				f.t.Fatalf("attempts = %d", rec.Attempts)
			}
		}},
		{"unknown held off by a backoff", func(f *resolveFixture) {
			f.unknown()
			recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 1})
			if err != nil || len(recs) != 1 {
				f.t.Fatalf("acquire: %v, %v", recs, err)
			}
			if _, err := f.store.Transition(context.Background(), runtime.TransitionParams{ID: f.id, From: runtime.StateUnknown, Owner: "rec",
				Version: recs[0].Version, To: runtime.StateUnknown, Lease: time.Hour}); err != nil {
				f.t.Fatal(err)
			}
			if rec := f.get(); !rec.LeaseLive() || rec.Owner != "" {
				f.t.Fatalf("not held off: %+v", rec)
			}
		}},
		{"processing whose worker died", func(f *resolveFixture) {
			f.processing("worker-1", time.Second)
			f.clock.add(2 * time.Second)
		}},
	}
	for _, to := range []runtime.ResolveTo{runtime.ResolveSuccess, runtime.ResolveFailed, runtime.ResolveReleased} {
		for _, s := range setups {
			t.Run(string(to)+"/"+s.name, func(t *testing.T) {
				f := newResolveFixture(t)
				s.setup(f)
				before := f.get()
				var log bytes.Buffer
				r := f.resolution(to)
				r.Version, r.TTL, r.Logger = before.Version, time.Hour, slog.New(slog.NewJSONHandler(&log, nil))
				res, err := runtime.Resolve(context.Background(), f.store, r)
				if err != nil {
					t.Fatalf("Resolve: %v", err)
				}
				if res.Before.Version != before.Version || res.Before.State != before.State {
					t.Fatalf("Before = %+v, want %+v", res.Before, before)
				}
				wantNote := "resolved by hand: checked the gateway: charge ch_1 exists"
				var line map[string]any
				if err := json.Unmarshal(log.Bytes(), &line); err != nil {
					t.Fatalf("log is not one JSON line: %v: %s", err, log.String())
				}
				if line["who"] != "idemctl:alice@ops" || line["reason"] != r.Reason || line["to"] != string(to) || line["key"] != f.id.Key {
					t.Fatalf("log line lacks who/what/why: %s", log.String())
				}
				if rec, _ := line["record"].(map[string]any); rec == nil || rec["state"] != string(before.State) || rec["request"] == nil {
					t.Fatalf("log line lacks the record as it was: %s", log.String())
				}
				resp, ran, err := f.retry()
				switch to {
				case runtime.ResolveSuccess:
					rec := f.get()
					if res.State != runtime.StateSuccess || rec.State != runtime.StateSuccess || rec.Version != res.Version || rec.Note != wantNote ||
						rec.Owner != "" || !rec.ExpiresAt.Equal(f.clock.now().Add(time.Hour)) {
						t.Fatalf("record = %+v, result %+v", rec, res)
					}
					if err != nil || ran || resp.ChargeID != "ch_1" {
						t.Fatalf("retry = %+v, ran %v, %v; want the hand-set response replayed", resp, ran, err)
					}
				case runtime.ResolveFailed:
					rec := f.get()
					if res.State != runtime.StateFailed || rec.State != runtime.StateFailed || rec.Note != wantNote {
						t.Fatalf("record = %+v", rec)
					}
					var fe *runtime.FailedError
					if !errors.As(err, &fe) || fe.Code != "card_declined" || fe.Message != "declined at the gateway" || ran {
						t.Fatalf("retry = %v, ran %v; want the hand-set failure replayed", err, ran)
					}
					dec, derr := runtime.DecodeFailure(f.id, rec.Response)
					if derr != nil || dec.Code != "card_declined" {
						t.Fatalf("DecodeFailure = %+v, %v", dec, derr)
					}
				case runtime.ResolveReleased:
					if res.State != "" || res.Version != 0 {
						t.Fatalf("result = %+v", res)
					}
					if !strings.Contains(log.String(), "this line is all that remains of it") {
						t.Fatalf("release log: %s", log.String())
					}
					if err != nil || !ran || resp.ChargeID != "ch_again" {
						t.Fatalf("retry = %+v, ran %v, %v; want the effect run again", resp, ran, err)
					}
				}
			})
		}
	}
}

// resolveHookStore runs a hook once, right after the first Get: what
// another process does between Resolve's read and its claim.
type resolveHookStore struct {
	*memstore.Store
	once sync.Once
	hook func()
}

func (s *resolveHookStore) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	s.once.Do(s.hook)
	return rec, err
}

func TestResolveRacesBetweenReadAndClaim(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *resolveFixture)
		between func(f *resolveFixture)
		also    error
		mention string
		check   func(f *resolveFixture, before runtime.Record)
	}{
		{"a reconciler acquires it", func(f *resolveFixture) { f.unknown() }, func(f *resolveFixture) {
			if recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec-2", Lease: time.Minute, Limit: 1}); err != nil || len(recs) != 1 {
				f.t.Fatalf("acquire: %v, %v", recs, err)
			}
		}, runtime.ErrInProgress, `held by a reconciler (or a worker converging it) (owner "rec-2"`, func(f *resolveFixture, before runtime.Record) {
			if rec := f.get(); rec.Owner != "rec-2" || rec.State != runtime.StateUnknown {
				f.t.Fatalf("record = %+v, want the reconciler's", rec)
			}
		}},
		{"a worker takes the dead worker's lease over", func(f *resolveFixture) {
			f.processing("worker-1", time.Second)
			f.clock.add(2 * time.Second)
		}, func(f *resolveFixture) {
			if res, err := f.store.Claim(context.Background(), runtime.ClaimParams{ID: f.id, Fingerprint: f.fp, Request: f.req, Owner: "worker-2", Lease: time.Minute}); err != nil || !res.Claimed {
				f.t.Fatalf("takeover: %+v, %v", res, err)
			}
		}, runtime.ErrInProgress, `held by a worker (owner "worker-2"`, func(f *resolveFixture, before runtime.Record) {
			if rec := f.get(); rec.Owner != "worker-2" || rec.State != runtime.StateProcessing {
				f.t.Fatalf("record = %+v, want worker-2's", rec)
			}
		}},
		{"another operator resolves it", func(f *resolveFixture) { f.unknown() }, func(f *resolveFixture) {
			r := f.resolution(runtime.ResolveFailed)
			r.Owner = "idemctl:bob@ops"
			if _, err := runtime.Resolve(context.Background(), f.store, r); err != nil {
				f.t.Fatal(err)
			}
		}, nil, "is FAILED already", func(f *resolveFixture, before runtime.Record) {
			if rec := f.get(); rec.State != runtime.StateFailed {
				f.t.Fatalf("record = %+v", rec)
			}
		}},
		{"it vanishes (released by its reconciler)", func(f *resolveFixture) { f.unknown() }, func(f *resolveFixture) {
			recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 1})
			if err != nil || len(recs) != 1 {
				f.t.Fatalf("acquire: %v, %v", recs, err)
			}
			if err := f.store.Release(context.Background(), runtime.ReleaseParams{ID: f.id, State: runtime.StateUnknown, Owner: "rec", Version: recs[0].Version}); err != nil {
				f.t.Fatal(err)
			}
		}, runtime.ErrNotFound, "vanished", func(f *resolveFixture, before runtime.Record) {
			if _, err := f.store.Get(context.Background(), f.id); !errors.Is(err, runtime.ErrNotFound) {
				f.t.Fatalf("the record the claim created was not released: %v", err)
			}
		}},
		{"it is replaced by another life whose worker died", func(f *resolveFixture) { f.unknown() }, (*resolveFixture).replacedByDeadLife, nil, "changed while it was being taken", func(f *resolveFixture, before runtime.Record) {
			// The take names the version read (ClaimParams.IfVersion): the
			// new life is left as it was, never taken.
			rec := f.get()
			if rec.State != runtime.StateProcessing || rec.Owner != "worker-3" || rec.CreatedAt.Equal(before.CreatedAt) {
				f.t.Fatalf("record = %+v, want the new life left as it was", rec)
			}
			f.clock.add(time.Second)
			if rec := f.get(); rec.LeaseLive() {
				f.t.Fatalf("handed back with a live lease: %+v", rec)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newResolveFixture(t)
			tc.setup(f)
			before := f.get()
			hs := &resolveHookStore{Store: f.store, hook: func() { tc.between(f) }}
			_, err := runtime.Resolve(context.Background(), hs, f.resolution(runtime.ResolveSuccess))
			if !errors.Is(err, runtime.ErrNotResolvable) || (tc.also != nil && !errors.Is(err, tc.also)) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error = %v, want ErrNotResolvable (and %v) saying %q", err, tc.also, tc.mention)
			}
			tc.check(f, before)
		})
	}
}

// A worker still running when its record is resolved by hand cannot
// record its own outcome: the resolution stands.
func TestResolveFencesTheStaleWorker(t *testing.T) {
	f := newResolveFixture(t)
	stale := f.processing("worker-1", time.Second)
	f.clock.add(2 * time.Second)
	if _, err := runtime.Resolve(context.Background(), f.store, f.resolution(runtime.ResolveSuccess)); err != nil {
		t.Fatal(err)
	}
	_, err := f.store.Transition(context.Background(), runtime.TransitionParams{ID: f.id, From: runtime.StateProcessing, Owner: "worker-1",
		Version: stale.Version, To: runtime.StateFailed, TTL: time.Hour, Response: runtime.EncodeFailure(errors.New("late")), Token: "w1#9"})
	if !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale worker's completion = %v, want ErrLeaseLost", err)
	}
	if _, err := f.store.Renew(context.Background(), runtime.RenewParams{ID: f.id, State: runtime.StateProcessing, Owner: "worker-1", Version: stale.Version, Lease: time.Minute}); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("stale worker's renewal = %v, want ErrLeaseLost", err)
	}
	if rec := f.get(); rec.State != runtime.StateSuccess || string(rec.Response) != `{"charge_id":"ch_1"}` {
		t.Fatalf("record = %+v", rec)
	}
}

// Concurrent operators and a reconciler on one record: exactly one
// resolution is written, every other attempt is refused.
func TestResolveConcurrentOperatorsOneWins(t *testing.T) {
	for round := range 20 {
		f := newResolveFixture(t)
		f.unknown()
		var ok, refused atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				to := []runtime.ResolveTo{runtime.ResolveSuccess, runtime.ResolveFailed, runtime.ResolveReleased}[i%3]
				r := f.resolution(to)
				r.Owner = "op-" + string(rune('a'+i))
				_, err := runtime.Resolve(context.Background(), f.store, r)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, runtime.ErrNotResolvable):
					refused.Add(1)
				default:
					t.Errorf("Resolve: %v", err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _ = f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 1})
		}()
		close(start)
		wg.Wait()
		// A released record may be resolved no further (absent); a final one
		// never. So at most one operator wins; none only if the reconciler
		// took the record first.
		rec, err := f.store.Get(context.Background(), f.id)
		reconcilerHolds := err == nil && rec.Owner == "rec"
		if ok.Load() > 1 || (ok.Load() == 0 && !reconcilerHolds) || ok.Load()+refused.Load() != 16 {
			t.Fatalf("round %d: %d resolved, %d refused; record %+v, %v", round, ok.Load(), refused.Load(), rec, err)
		}
	}
}

// A person found out that a timed-out charge went through, and records it:
// retries then replay the response instead of staying UNKNOWN.
func ExampleResolve() {
	ctx := runtime.WithScope(context.Background(), "tenant-1")
	store := memstore.New()
	rt, _ := runtime.New(store)
	charge := runtime.Call[resolveReq, resolveResp]{
		Operation: "Payments.Charge", Key: "order-1001", Request: resolveReq{Amount: 4200},
		Effect: func(context.Context, resolveReq) (resolveResp, error) {
			return resolveResp{}, context.DeadlineExceeded // the gateway timed out
		},
	}
	_, err := runtime.Do(ctx, rt, charge)
	fmt.Println(errors.Is(err, runtime.ErrOutcomeUnknown))

	res, err := runtime.Resolve(ctx, store, runtime.Resolution{
		ID:       runtime.Identity{Scope: "tenant-1", Operation: "Payments.Charge", Key: "order-1001"},
		To:       runtime.ResolveSuccess,
		Response: []byte(`{"charge_id":"ch_3QxY"}`),
		Reason:   "ch_3QxY found in the gateway dashboard",
		Owner:    "idemctl:alice@ops",
	})
	fmt.Println(res.Before.State, "->", res.State, err)

	resp, err := runtime.Do(ctx, rt, charge) // the client's retry
	fmt.Println(resp.ChargeID, err)

	_, err = runtime.Resolve(ctx, store, runtime.Resolution{ID: res.Before.ID, To: runtime.ResolveReleased, Reason: "oops", Owner: "idemctl:bob@ops"})
	fmt.Println(errors.Is(err, runtime.ErrNotResolvable))
	// Output:
	// true
	// UNKNOWN -> SUCCESS <nil>
	// ch_3QxY <nil>
	// true
}

// resolveOldStore is a store of one's own that predates
// ClaimParams.IfVersion: it takes a record at any version.
type resolveOldStore struct {
	*resolveHookStore
}

func (s resolveOldStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	p.IfVersion = 0
	return s.resolveHookStore.Claim(ctx, p)
}

// TestResolveOnStoreWithoutIfVersion: on a store that ignores the version a
// take names, Resolve still refuses a record replaced by another life
// between its read and its take (by the record's creation time), and hands
// the new life back untouched but for a lease that ends at once.
func TestResolveOnStoreWithoutIfVersion(t *testing.T) {
	f := newResolveFixture(t)
	f.unknown()
	before := f.get()
	hs := resolveOldStore{&resolveHookStore{Store: f.store, hook: f.replacedByDeadLife}}
	_, err := runtime.Resolve(context.Background(), hs, f.resolution(runtime.ResolveSuccess))
	if !errors.Is(err, runtime.ErrNotResolvable) || !strings.Contains(err.Error(), "replaced while it was being taken") {
		t.Fatalf("error = %v, want ErrNotResolvable saying %q", err, "replaced while it was being taken")
	}
	rec := f.get()
	if rec.State != runtime.StateProcessing || rec.Owner == "idemctl:alice@ops" || rec.CreatedAt.Equal(before.CreatedAt) {
		t.Fatalf("record = %+v, want the new life handed back", rec)
	}
	f.clock.add(time.Second)
	if rec := f.get(); rec.LeaseLive() {
		t.Fatalf("handed back with a live lease: %+v", rec)
	}
}

// replacedByDeadLife replaces the UNKNOWN record by another life: a
// reconciler acquires and releases it, a worker claims the key again and
// dies (its lease ends).
func (f *resolveFixture) replacedByDeadLife() {
	recs, err := f.store.AcquirePending(context.Background(), runtime.AcquireParams{Owner: "rec", Lease: time.Minute, Limit: 1})
	if err != nil || len(recs) != 1 {
		f.t.Fatalf("acquire: %v, %v", recs, err)
	}
	if err := f.store.Release(context.Background(), runtime.ReleaseParams{ID: f.id, State: runtime.StateUnknown, Owner: "rec", Version: recs[0].Version}); err != nil {
		f.t.Fatal(err)
	}
	f.clock.add(time.Second)
	f.processing("worker-3", time.Second)
	f.clock.add(2 * time.Second)
}
