package idemgrpc_test

// Regression tests for issue 16 (the adapters keep the exactly-once
// promise), on a real grpc server over loopback and on each store.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// Bug 1: a handler error that says the outcome is unknown (a timeout or a
// cancellation anywhere in its tree, or the caller's own deadline) leaves
// the record UNKNOWN under every error policy: a retry with the same key
// never runs the handler again.
func TestIssue16UncertainHandlerErrors(t *testing.T) {
	policies := []struct {
		name string
		opts []runtime.Option
	}{
		{"default policy", nil},
		{"RecordFailed", []runtime.Option{runtime.WithErrorPolicy(runtime.RecordFailed)}},
		{"ReleaseRecord", []runtime.Option{runtime.WithErrorPolicy(runtime.ReleaseRecord)}},
	}
	modes := []string{"wrapped-deadline", "url-timeout", "wrapped-canceled", "status-canceled", "own-deadline", "unavailable-after-deadline"}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			for _, p := range policies {
				t.Run(p.name, func(t *testing.T) {
					f := start(t, setup{store: store, rtOpts: p.opts})
					tenant := teststores.Unique()
					for _, mode := range modes {
						t.Run(mode, func(t *testing.T) { uncertainRetry(t, f, tenant, mode) })
					}
				})
			}
		})
	}
}

// uncertainRetry calls in mode and retries with the same key: the retry
// gets OUTCOME_UNKNOWN and the handler ran once.
//
// In modes own-deadline and unavailable-after-deadline the first call has
// a 100 ms deadline; on a loaded machine the claim alone may use it up (the
// handler never runs, the schedule did not happen): it is tried again under
// a new key, at most 100 times or 20 s. A handler run twice, or a retry
// answered otherwise, fails at once.
func uncertainRetry(t *testing.T, f *fixture, tenant, mode string) {
	t.Helper()
	start := time.Now()
	for try := 0; ; try++ {
		last := try >= 100 || time.Since(start) > 20*time.Second
		key := mode
		if try > 0 {
			key = fmt.Sprintf("%s-%d", mode, try)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if mode == "own-deadline" || mode == "unavailable-after-deadline" {
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		}
		before := f.runs.Load()
		first := f.call(t, ctx, call{tenant: tenant, keys: []string{key}, mode: mode})
		cancel()
		if first.err == nil {
			t.Fatal("first call succeeded")
		}
		if f.runs.Load() == before {
			// A handler that started as the caller gave up counts: the
			// server ends it at the deadline too, so it starts at once or
			// never.
			time.Sleep(50 * time.Millisecond)
		}
		if f.runs.Load() == before {
			if last {
				t.Fatalf("no first call reached the handler in %d tries (%v): last %v", try+1, time.Since(start), first.err)
			}
			t.Logf("the first call under %s never reached the handler (%v): again", key, first.err)
			continue
		}
		retryUnknown(t, f, tenant, key, mode, before)
		return
	}
}

// retryUnknown retries key and checks the answer is OUTCOME_UNKNOWN with
// the handler run once since before. Bounded: a retry that runs the handler
// again in modes own-deadline and unavailable-after-deadline waits for its
// deadline. The first call's handler outlives its caller's deadline: until
// it has returned and its outcome is recorded (under load, past the
// retry's second), a retry is told the call is in progress, or waits for it
// until its own deadline. Either answer is right then; the retry tries
// again (at most 20 s), and the handler must still have run once.
func retryUnknown(t *testing.T, f *fixture, tenant, key, mode string, before int32) {
	t.Helper()
	give := time.Now().Add(20 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		retry := f.call(t, rctx, call{tenant: tenant, keys: []string{key}, mode: mode})
		rcancel()
		if n := f.runs.Load() - before; n != 1 {
			t.Fatalf("the handler ran %d times for one key (retry answered %v)", n, retry.err)
		}
		r, _ := reason(retry.err)
		waiting := status.Code(retry.err) == codes.DeadlineExceeded || r == idemgrpc.ReasonInProgress
		if !waiting || time.Now().After(give) {
			wantCode(t, retry, codes.Aborted, idemgrpc.ReasonOutcomeUnknown, true)
			return
		}
		t.Logf("retry while the first call is in flight: %v (reason %q); trying again", retry.err, r)
	}
}

// Bug 6: a record that became FAILED through a no-query policy or a
// resolution by hand is a stable failure, not a store outage.
func TestIssue16FailedRecord(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			log, logs := testlog.New()
			f := start(t, setup{store: st.New(t), opts: []idemgrpc.Option{idemgrpc.Logger(log)}})
			ctx := context.Background()
			tenant := teststores.Unique()
			if err := runtime.RegisterNoQuery(f.rt, method, runtime.NoQueryPolicy{After: time.Millisecond, Resolve: runtime.NotHappenedFail}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"policy", "by-hand", "by-hand-code"} {
				f.call(t, ctx, call{tenant: tenant, keys: []string{k}, mode: "wrapped-deadline"})
			}
			time.Sleep(20 * time.Millisecond)
			rec, err := runtime.NewReconciler(f.rt)
			if err != nil {
				t.Fatal(err)
			}
			resolve := func(key string, failure error) {
				t.Helper()
				id := runtime.Identity{Scope: tenant, Operation: method, Key: key}
				if _, err := runtime.Resolve(ctx, f.rt.Store(), runtime.Resolution{ID: id, To: runtime.ResolveFailed, Failure: failure, Reason: "test", Owner: "test"}); err != nil {
					t.Fatal(err)
				}
			}
			resolve("by-hand", runtime.Permanent(errors.New("card declined by the issuer")))
			resolve("by-hand-code", runtime.Permanent(coded{"NOT_FOUND", "no such card"}))
			if _, err := rec.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				key    string
				code   codes.Code
				reason string
				msg    string
			}{
				{"policy", codes.FailedPrecondition, idemgrpc.ReasonFailed, "failed"},
				{"by-hand", codes.FailedPrecondition, idemgrpc.ReasonFailed, "card declined by the issuer"},
				{"by-hand-code", codes.NotFound, "", "no such card"},
			} {
				for range 2 {
					got := f.call(t, ctx, call{tenant: tenant, keys: []string{c.key}, mode: "wrapped-deadline"})
					r, retry := reason(got.err)
					if status.Code(got.err) != c.code || r != c.reason || retry || !strings.Contains(status.Convert(got.err).Message(), c.msg) {
						t.Fatalf("%s: %v (reason %q, retry info %v); want %v %q with %q", c.key, got.err, r, retry, c.code, c.reason, c.msg)
					}
				}
			}
			if n := f.runs.Load(); n != 3 {
				t.Fatalf("handler ran %d times; want 3", n)
			}
			if e := logs.At(slog.LevelError); len(e) != 0 {
				t.Fatalf("logged at ERROR: %q", e)
			}
		})
	}
}

type coded struct{ code, msg string }

func (c coded) Error() string     { return c.msg }
func (c coded) ErrorCode() string { return c.code }

// Bug 7: an error status too large for the store is still a rejection for
// every duplicate (its message shortened), never "the call succeeded".
func TestIssue16LargeErrorStatus(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			f := start(t, setup{store: st.New(t)})
			ctx := context.Background()
			tenant := teststores.Unique()
			first := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "big-error"})
			if status.Code(first.err) != codes.InvalidArgument {
				t.Fatalf("first: %v", first.err)
			}
			for range 2 {
				dup := f.call(t, ctx, call{tenant: tenant, keys: []string{"k1"}, mode: "big-error"})
				msg := status.Convert(dup.err).Message()
				if status.Code(dup.err) != codes.InvalidArgument || !strings.HasPrefix(msg, "card rejected: xxx") {
					t.Fatalf("duplicate: %v %.80s", status.Code(dup.err), msg)
				}
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times", n)
			}
		})
	}
}

// Bug 8: a duplicate whose own deadline passes, or that is cancelled, while
// it waits for the call in flight gets its own status, and nothing is
// logged at ERROR.
func TestIssue16DuplicateContextEnds(t *testing.T) {
	log, logs := testlog.New()
	f := start(t, setup{store: teststores.All()[0].New(t), opts: []idemgrpc.Option{idemgrpc.Logger(log)}})
	tenant := teststores.Unique()
	for _, c := range []struct {
		key  string
		want codes.Code
	}{{"deadline", codes.DeadlineExceeded}, {"cancel", codes.Canceled}} {
		runs := f.runs.Load()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.call(t, context.Background(), call{tenant: tenant, keys: []string{c.key}, mode: "wait"})
		}()
		for f.runs.Load() == runs {
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if c.want == codes.Canceled {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
		}
		dup := f.call(t, ctx, call{tenant: tenant, keys: []string{c.key}, mode: "wait"})
		cancel()
		if status.Code(dup.err) != c.want {
			t.Fatalf("%s: the client got %v", c.key, dup.err)
		}
		<-done
		// Two answers: the first call's success and the duplicate's status.
		var served []error
		for range 2 {
			select {
			case err := <-f.served:
				if err != nil {
					served = append(served, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no answer from the server")
			}
		}
		if len(served) != 1 || status.Code(served[0]) != c.want {
			t.Fatalf("%s: the server answered %v; want one %v", c.key, served, c.want)
		}
	}
	if e := logs.At(slog.LevelError); len(e) != 0 {
		t.Fatalf("logged at ERROR: %q", e)
	}
}

// Issue 16 features on the wire: header metadata replayed (credentials
// excepted), a scope over 255 bytes, grpc-retry-pushback-ms beside
// RetryInfo, and a record resolved by hand in the documented JSON.
func TestIssue16Features(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			f := start(t, setup{store: st.New(t), rtOpts: []runtime.Option{runtime.WithMaxWait(30 * time.Millisecond)}})
			ctx := context.Background()
			tenant := teststores.Unique()

			a := f.call(t, ctx, call{tenant: tenant, keys: []string{"hdr"}, mode: "header"})
			b := f.call(t, ctx, call{tenant: tenant, keys: []string{"hdr"}, mode: "header"})
			if a.err != nil || b.err != nil || !b.replayed || strings.Join(b.header.Get("x-charge-id"), ",") != "ch_1" ||
				len(b.header.Get("authorization")) != 0 || len(b.header.Get("set-cookie")) != 0 {
				t.Fatalf("header replay: %v %v, replayed %v, header %v", a.err, b.err, b.replayed, b.header)
			}

			long := tenant + strings.Repeat("spiffe://example.org/ns/payments/sa/", 8)
			l1 := f.call(t, ctx, call{tenant: long + "a", keys: []string{"k"}, cents: 1})
			l2 := f.call(t, ctx, call{tenant: long + "a", keys: []string{"k"}, cents: 1})
			l3 := f.call(t, ctx, call{tenant: long + "b", keys: []string{"k"}, cents: 1})
			if l1.err != nil || l2.err != nil || l3.err != nil || !l2.replayed || l3.replayed {
				t.Fatalf("long scopes: %v, %v (replayed %v), %v (replayed %v)", l1.err, l2.err, l2.replayed, l3.err, l3.replayed)
			}
			// A principal named as another's long scope is digested
			// (first 64 bytes, "…#sha256:", the SHA-256) is a scope of its
			// own: it never gets the long scope's responses.
			sum := sha256.Sum256([]byte(long + "a"))
			forged := (long + "a")[:64] + "…#sha256:" + hex.EncodeToString(sum[:])
			if l4 := f.call(t, ctx, call{tenant: forged, keys: []string{"k"}, cents: 1}); l4.err != nil || l4.replayed {
				t.Fatalf("the digest form of a long scope as a scope: %v (replayed %v); want a run of its own", l4.err, l4.replayed)
			}

			runs := f.runs.Load()
			go f.call(t, ctx, call{tenant: tenant, keys: []string{"slow"}, mode: "slow"})
			for f.runs.Load() == runs {
				time.Sleep(time.Millisecond)
			}
			busy := f.call(t, ctx, call{tenant: tenant, keys: []string{"slow"}, mode: "slow"})
			wantCode(t, busy, codes.Aborted, idemgrpc.ReasonInProgress, true)
			if p := busy.trailer.Get("grpc-retry-pushback-ms"); len(p) != 1 || p[0] != "1000" {
				t.Fatalf("in progress: trailer %v; want grpc-retry-pushback-ms: 1000", busy.trailer)
			}

			f.call(t, ctx, call{tenant: tenant, keys: []string{"resolved"}, mode: "wrapped-deadline"})
			id := runtime.Identity{Scope: tenant, Operation: method, Key: "resolved"}
			if _, err := runtime.Resolve(ctx, f.rt.Store(), runtime.Resolution{ID: id, To: runtime.ResolveSuccess, Reason: "test", Owner: "test",
				Response: []byte(`{"type":"google.protobuf.Struct","message":{"charge":"ch_by_hand","cents":5}}`)}); err != nil {
				t.Fatal(err)
			}
			r := f.call(t, ctx, call{tenant: tenant, keys: []string{"resolved"}, mode: "wrapped-deadline"})
			if r.err != nil || !r.replayed || r.resp.Fields["charge"].GetStringValue() != "ch_by_hand" || r.resp.Fields["cents"].GetNumberValue() != 5 {
				t.Fatalf("resolved by hand: %v %v", r.resp, r.err)
			}
		})
	}
}

// A method's "did it happen?" query: a handler times out after its effect;
// a duplicate converges through the query inline, and the reconciler
// converges another such call, without the handler running again.
func TestIssue16Query(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			ledger := &sync.Map{}
			var tokens sync.Map
			q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
				order := req.(*structpb.Struct).Fields["order"].GetStringValue()
				tok, ok := runtime.FencingToken(ctx)
				tokens.Store(order, ok && tok > 0)
				if charge, ok := ledger.Load(order); ok {
					return charge.(*structpb.Struct), runtime.OutcomeSucceeded, nil
				}
				return nil, runtime.OutcomeNotHappened, nil
			}
			f := start(t, setup{store: st.New(t), ledger: ledger, opts: []idemgrpc.Option{idemgrpc.Query(method, q, runtime.QueryOptions{})}})
			ctx := context.Background()
			tenant := teststores.Unique()
			for i, key := range []string{"inline", "reconciler"} {
				first := f.call(t, ctx, call{tenant: tenant, keys: []string{key}, mode: "effect-then-timeout", order: key, cents: 5})
				if status.Code(first.err) != codes.DeadlineExceeded {
					t.Fatalf("%s: first call: %v", key, first.err)
				}
				if key == "reconciler" {
					rec, err := runtime.NewReconciler(f.rt)
					if err != nil {
						t.Fatal(err)
					}
					if st, err := rec.RunOnce(ctx); err != nil || st.Succeeded != 1 {
						t.Fatalf("reconciler: %+v %v", st, err)
					}
				}
				dup := f.call(t, ctx, call{tenant: tenant, keys: []string{key}, mode: "effect-then-timeout", order: key, cents: 5})
				want := fmt.Sprintf("ch_%d", i+1)
				if dup.err != nil || dup.resp.Fields["charge"].GetStringValue() != want {
					t.Fatalf("%s: duplicate got %v %v; want charge %s", key, dup.resp, dup.err, want)
				}
				if ok, _ := tokens.Load(key); ok != true {
					t.Fatalf("%s: the query got no fencing token", key)
				}
			}
			if n := f.runs.Load(); n != 2 {
				t.Fatalf("handler ran %d times; want 2", n)
			}
		})
	}
}

// A query that errs could not tell, whatever outcome it gives beside the
// error: the duplicate is told OUTCOME_UNKNOWN and the handler does not run
// again. (The interceptor dropped the error of an answer "succeeded", and
// the runtime ran the effect again on "not happened" with an error.)
func TestQueryErrorCannotTell(t *testing.T) {
	lookupErr := errors.New("lookup failed: connection reset")
	for _, o := range []runtime.Outcome{runtime.OutcomeSucceeded, runtime.OutcomeNotHappened} {
		t.Run(o.String(), func(t *testing.T) {
			q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
				return &structpb.Struct{}, o, lookupErr
			}
			f := start(t, setup{store: teststores.Memory(t), ledger: &sync.Map{}, opts: []idemgrpc.Option{idemgrpc.Query(method, q, runtime.QueryOptions{})}})
			ctx := context.Background()
			tenant := teststores.Unique()
			first := f.call(t, ctx, call{tenant: tenant, keys: []string{"k"}, mode: "effect-then-timeout", order: "k", cents: 5})
			if status.Code(first.err) != codes.DeadlineExceeded {
				t.Fatalf("first call: %v", first.err)
			}
			dup := f.call(t, ctx, call{tenant: tenant, keys: []string{"k"}, mode: "effect-then-timeout", order: "k", cents: 5})
			wantCode(t, dup, codes.Aborted, idemgrpc.ReasonOutcomeUnknown, true)
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times; want 1", n)
			}
		})
	}
}
