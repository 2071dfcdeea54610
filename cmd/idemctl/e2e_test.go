package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/redisstore"
)

// backend is a real store for the services under test and the flag that
// points idemctl at it.
type backend struct {
	name string
	open func(t *testing.T) (runtime.Store, []string)
}

func backends() []backend {
	return []backend{
		{"postgres", func(t *testing.T) (runtime.Store, []string) {
			dsn := testenv.PostgresURL(t)
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if err := pgstore.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			return pgstore.New(pool), []string{"-postgres", dsn}
		}},
		{"redis", func(t *testing.T) (runtime.Store, []string) {
			url := testenv.RedisURL(t)
			opt, err := redis.ParseURL(url)
			if err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(opt)
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c)
			if err != nil {
				t.Fatal(err)
			}
			return s, []string{"-redis", url}
		}},
		{"redis-cluster", func(t *testing.T) (runtime.Store, []string) {
			addrs := testenv.RedisClusterAddrs(t)
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { _ = c.Close() })
			// Not the default settings, to check that the flags reach the store.
			s, err := redisstore.New(c, redisstore.WithPrefix("idemctl-e2e:"), redisstore.WithBuckets(64))
			if err != nil {
				t.Fatal(err)
			}
			return s, []string{"-redis-cluster", strings.Join(addrs, ","), "-redis-prefix", "idemctl-e2e:", "-redis-buckets", "64"}
		}},
	}
}

type chargeReq struct {
	Amount int `json:"amount"`
}

type chargeResp struct {
	ChargeID string `json:"charge_id"`
}

// renewalsDropped is a store whose lease renewals never reach the store: a
// worker that froze, as far as the store can tell.
type renewalsDropped struct{ runtime.Store }

func (renewalsDropped) Renew(_ context.Context, p runtime.RenewParams) (time.Time, error) {
	return time.Now().Add(p.Lease), nil
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestEndToEnd makes records that need a person through the runtime on a
// real store (a timed-out effect, a record a reconciler gave up on, a
// worker whose renewals were lost, a live worker), lists, shows and resolves
// them with idemctl, and checks what retries through runtime.Do see.
func TestEndToEnd(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store, storeArgs := b.open(t)
			e2e(t, store, storeArgs)
		})
	}
}

func e2e(t *testing.T, store runtime.Store, storeArgs []string) {
	ctx := context.Background()
	sfx := suffix()
	scope := "idemctl-e2e/" + sfx
	opCharge, opRefund, opShip := "Idemctl"+sfx+".Charge", "Idemctl"+sfx+".Refund", "Idemctl"+sfx+".Ship"
	sctx := runtime.WithScope(ctx, scope)
	rt, err := runtime.New(store, runtime.WithOwner("e2e-service-"+sfx))
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return runFor(t, nil, append(append([]string{args[0]}, storeArgs...), args[1:]...)...)
	}
	timedOut := func(context.Context, chargeReq) (chargeResp, error) {
		return chargeResp{}, context.DeadlineExceeded
	}
	ranAgain := 0
	again := func(_ context.Context, r chargeReq) (chargeResp, error) {
		ranAgain++
		return chargeResp{ChargeID: "ch_again"}, nil
	}

	// 1. UNKNOWN: the gateway call timed out; the operation has no query.
	_, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opCharge, Key: "timeout-1", Request: chargeReq{Amount: 42}, Effect: timedOut})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("timed-out call: %v", err)
	}

	// 2. Given up: a reconciler whose query never tells, MaxAttempts 1.
	_, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opRefund, Key: "gaveup-1", Request: chargeReq{Amount: 7}, Effect: timedOut})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("timed-out refund: %v", err)
	}
	recRT, err := runtime.New(store, runtime.WithOwner("e2e-reconciler-"+sfx))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register(recRT, opRefund, func(context.Context, chargeReq) (chargeResp, runtime.Outcome, error) {
		return chargeResp{}, runtime.OutcomeUnknown, errors.New("gateway: no such charge API")
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	// 2b. Held off: an operation without a query, whose no-query policy
	// leaves a window of an hour for a person before it resolves by itself.
	_, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opShip, Key: "window-1", Request: chargeReq{Amount: 3}, Effect: timedOut})
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("timed-out shipment: %v", err)
	}
	if err := runtime.RegisterNoQuery(recRT, opShip, runtime.NoQueryPolicy{After: time.Hour, Resolve: runtime.NotHappenedFail}); err != nil {
		t.Fatal(err)
	}
	rec, err := runtime.NewReconciler(recRT, runtime.ReconcileMaxAttempts(1), runtime.ReconcileBackoff(10*time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := rec.RunOnce(ctx); err != nil || st.GaveUp != 1 || st.StillUnknown != 1 {
		t.Fatalf("reconcile: %+v, %v", st, err)
	}

	// 3. A worker whose renewals are lost: PROCESSING, lease expired, the
	// effect still blocked.
	deadRT, err := runtime.New(renewalsDropped{store}, runtime.WithOwner("e2e-frozen-worker-"+sfx), runtime.WithLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	unfreeze := make(chan struct{})
	frozenDone := make(chan error, 1)
	go func() {
		_, err := runtime.Do(sctx, deadRT, runtime.Call[chargeReq, chargeResp]{Operation: opCharge, Key: "frozen-1", Request: chargeReq{Amount: 9},
			Effect: func(context.Context, chargeReq) (chargeResp, error) {
				<-unfreeze
				return chargeResp{ChargeID: "ch_late"}, nil
			}})
		frozenDone <- err
	}()
	defer func() {
		select {
		case <-unfreeze:
		default:
			close(unfreeze)
		}
	}()
	frozenID := runtime.Identity{Scope: scope, Operation: opCharge, Key: "frozen-1"}
	waitFor(t, "the frozen worker's lease to expire", func() bool {
		r, err := store.Get(ctx, frozenID)
		return err == nil && r.State == runtime.StateProcessing && !r.LeaseLive()
	})

	// 4. A live worker: its record must be refused.
	liveRT, err := runtime.New(store, runtime.WithOwner("e2e-live-worker-"+sfx), runtime.WithLease(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	finishLive := make(chan struct{})
	liveDone := make(chan error, 1)
	go func() {
		_, err := runtime.Do(sctx, liveRT, runtime.Call[chargeReq, chargeResp]{Operation: opCharge, Key: "live-1", Request: chargeReq{Amount: 1},
			Effect: func(context.Context, chargeReq) (chargeResp, error) {
				<-finishLive
				return chargeResp{ChargeID: "ch_live"}, nil
			}})
		liveDone <- err
	}()
	liveID := runtime.Identity{Scope: scope, Operation: opCharge, Key: "live-1"}
	waitFor(t, "the live worker's claim", func() bool { _, err := store.Get(ctx, liveID); return err == nil })
	time.Sleep(30 * time.Millisecond) // the given-up record's 10ms backoff ends

	// list -json: every record of the scope, in key byte order.
	code, out, errOut := ctl("list", "-scope", scope, "-json")
	if code != exitOK {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	recs := decodeLines(t, out)
	if got := keysOf(recs); got != "frozen-1 live-1 timeout-1 gaveup-1 window-1" {
		// (scope, operation, key) order: Charge before Refund.
		t.Fatalf("list keys = %q\n%s", got, out)
	}
	byKey := map[string]recordJSON{}
	for _, r := range recs {
		byKey[r.Key] = r
	}
	if r := byKey["timeout-1"]; r.State != runtime.StateUnknown || r.Lease != "free" || string(r.Request) != `{"amount":42}` || r.Operation != opCharge || r.Scope != scope {
		t.Fatalf("timeout-1 = %+v", r)
	}
	if r := byKey["gaveup-1"]; r.Attempts != 1 || !strings.Contains(r.Note, "reconcile gave up after 1 attempts") || r.Lease != "expired" {
		t.Fatalf("gaveup-1 = %+v", r)
	}
	if r := byKey["frozen-1"]; r.State != runtime.StateProcessing || r.Lease != "expired" || r.Owner != "e2e-frozen-worker-"+sfx {
		t.Fatalf("frozen-1 = %+v", r)
	}
	if r := byKey["window-1"]; r.Lease != "held-off" || r.Owner != "" || !strings.Contains(r.Note, "resolved by policy at") {
		t.Fatalf("window-1 = %+v", r)
	}
	if r := byKey["live-1"]; r.Lease != "held" {
		t.Fatalf("live-1 = %+v", r)
	}

	// Filters.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-gave-up", "1"}, "gaveup-1 window-1"}, // the no-query hold was an acquisition too
		{[]string{"-gave-up", "2"}, ""},
		{[]string{"-stuck"}, "frozen-1 timeout-1 gaveup-1"},
		{[]string{"-stuck", "-state", "processing"}, "frozen-1"},
		{[]string{"-op", opRefund}, "gaveup-1"},
		{[]string{"-state", "unknown"}, "timeout-1 gaveup-1 window-1"},
		{[]string{"-op", opShip, "-stuck"}, ""},
		{[]string{"-state", "success,failed"}, ""},
		{[]string{"-older-than", "1h"}, ""},
	} {
		code, out, errOut := ctl(append([]string{"list", "-scope", scope, "-json"}, tc.args...)...)
		if got := keysOf(decodeLines(t, out)); code != exitOK || got != tc.want {
			t.Errorf("list %v: exit %d, keys %q, want %q (%s)", tc.args, code, got, tc.want, errOut)
		}
	}

	// Paging: -limit cuts, the cursor on stderr continues.
	code, out, errOut = ctl("list", "-scope", scope, "-limit", "3")
	if code != exitOK || strings.Count(out, "\n") != 4 || !strings.HasPrefix(out, "STATE ") || !strings.Contains(errOut, "continue with -after '") {
		t.Fatalf("list -limit 3: exit %d\n%s\n%s", code, out, errOut)
	}
	cursor := errOut[strings.Index(errOut, "-after '")+len("-after '"):]
	cursor = cursor[:strings.Index(cursor, "'")]
	code, out, errOut = ctl("list", "-scope", scope, "-after", cursor, "-json")
	if got := keysOf(decodeLines(t, out)); code != exitOK || got != "gaveup-1 window-1" {
		t.Fatalf("list -after %s: exit %d, keys %q (%s)", cursor, code, got, errOut)
	}
	t.Logf("table:\n%s", mustRun(t, ctl, "list", "-scope", scope))

	// show.
	code, out, errOut = ctl("show", "-scope", scope, "-op", opCharge, "-key", "timeout-1", "-json")
	var shown recordJSON
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || shown.State != runtime.StateUnknown || string(shown.Request) != `{"amount":42}` {
		t.Fatalf("show -json: exit %d %s %s", code, out, errOut)
	}
	out = mustRun(t, ctl, "show", "-scope", scope, "-op", opCharge, "-key", "timeout-1")
	if !strings.Contains(out, "state        UNKNOWN") || !strings.Contains(out, "request (JSON):\n  {\n    \"amount\": 42\n  }") {
		t.Fatalf("show:\n%s", out)
	}
	t.Logf("show:\n%s", out)

	// Refusals: a live worker, an absent record; nothing changes.
	code, _, errOut = ctl("resolve", "-scope", scope, "-op", opCharge, "-key", "live-1", "-to", "released", "-reason", "test")
	if code != exitError || !strings.Contains(errOut, `held by a worker (owner "e2e-live-worker-`+sfx) || !strings.Contains(errOut, "resolution refused") {
		t.Fatalf("resolve a live record: exit %d: %s", code, errOut)
	}
	code, _, errOut = ctl("resolve", "-scope", scope, "-op", opCharge, "-key", "nothing-here", "-to", "released", "-reason", "test")
	if code != exitError || !strings.Contains(errOut, "no such record") {
		t.Fatalf("resolve an absent record: exit %d: %s", code, errOut)
	}
	code, _, errOut = ctl("show", "-scope", scope, "-op", opCharge, "-key", "nothing-here")
	if code != exitError || !strings.Contains(errOut, "no record") {
		t.Fatalf("show an absent record: exit %d: %s", code, errOut)
	}
	close(finishLive)
	if err := <-liveDone; err != nil {
		t.Fatalf("the live worker: %v", err)
	}

	// success: the retry replays the hand-set response.
	code, out, errOut = ctl("resolve", "-scope", scope, "-op", opCharge, "-key", "timeout-1", "-to", "success",
		"-response", `{"charge_id": "ch_hand"}`, "-reason", "ch_hand found in the gateway dashboard", "-who", "alice", "-version", itoa(shown.Version))
	if code != exitOK || !strings.Contains(out, "UNKNOWN (version "+itoa(shown.Version)) || !strings.Contains(out, "-> SUCCESS") {
		t.Fatalf("resolve success: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("resolve:\n%s%s", out, errOut)
	var audit map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(errOut)), &audit); err != nil || audit["who"] != "idemctl:alice" ||
		audit["reason"] != "ch_hand found in the gateway dashboard" || audit["to"] != "success" || audit["time"] == nil || audit["key"] != "timeout-1" {
		t.Fatalf("audit line: %v: %s", err, errOut)
	}
	resp, err := runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opCharge, Key: "timeout-1", Request: chargeReq{Amount: 42}, Effect: again})
	if err != nil || resp.ChargeID != "ch_hand" || ranAgain != 0 {
		t.Fatalf("retry after success: %+v, %v, ran %d", resp, err, ranAgain)
	}
	out = mustRun(t, ctl, "show", "-scope", scope, "-op", opCharge, "-key", "timeout-1")
	if !strings.Contains(out, "note         resolved by hand: ch_hand found in the gateway dashboard") || !strings.Contains(out, "state        SUCCESS") {
		t.Fatalf("show after success:\n%s", out)
	}
	// A final record is never changed by hand.
	code, _, errOut = ctl("resolve", "-scope", scope, "-op", opCharge, "-key", "timeout-1", "-to", "released", "-reason", "oops")
	if code != exitError || !strings.Contains(errOut, "is SUCCESS already") {
		t.Fatalf("resolve a final record: exit %d: %s", code, errOut)
	}

	// failed: the retry gets the failure.
	code, out, errOut = ctl("resolve", "-scope", scope, "-op", opRefund, "-key", "gaveup-1", "-to", "failed",
		"-message", "refund refused by the bank", "-code", "bank_refused", "-reason", "the bank's support confirmed", "-json")
	var rj resolveJSON
	if code != exitOK || json.Unmarshal([]byte(out), &rj) != nil || rj.State != runtime.StateFailed || rj.FromState != runtime.StateUnknown || rj.To != "failed" {
		t.Fatalf("resolve failed: exit %d\n%s\n%s", code, out, errOut)
	}
	_, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opRefund, Key: "gaveup-1", Request: chargeReq{Amount: 7}, Effect: again})
	var fe *runtime.FailedError
	if !errors.As(err, &fe) || fe.Code != "bank_refused" || fe.Message != "refund refused by the bank" || ranAgain != 0 {
		t.Fatalf("retry after failed: %v, ran %d", err, ranAgain)
	}
	code, out, _ = ctl("show", "-scope", scope, "-op", opRefund, "-key", "gaveup-1", "-json")
	if err := json.Unmarshal([]byte(out), &shown); code != exitOK || err != nil || shown.Failure == nil || shown.Failure.Code != "bank_refused" {
		t.Fatalf("show failed: %s", out)
	}
	out = mustRun(t, ctl, "show", "-scope", scope, "-op", opRefund, "-key", "gaveup-1")
	if !strings.Contains(out, "failure code     bank_refused") || !strings.Contains(out, "failure message  refund refused by the bank") {
		t.Fatalf("show failed:\n%s", out)
	}

	// success on a held-off record (no owner: moved by compare-and-set from
	// the version read), the response from a file.
	respFile := filepath.Join(t.TempDir(), "resp.json")
	if err := os.WriteFile(respFile, []byte("{\n  \"charge_id\": \"ship_1\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = ctl("resolve", "-scope", scope, "-op", opShip, "-key", "window-1", "-to", "success", "-response-file", respFile, "-reason", "parcel tracked")
	if code != exitOK || !strings.Contains(out, "-> SUCCESS") {
		t.Fatalf("resolve a held-off record: exit %d\n%s\n%s", code, out, errOut)
	}
	resp, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opShip, Key: "window-1", Request: chargeReq{Amount: 3}, Effect: again})
	if err != nil || resp.ChargeID != "ship_1" || ranAgain != 0 {
		t.Fatalf("retry after success on a held-off record: %+v, %v, ran %d", resp, err, ranAgain)
	}

	// released: the frozen worker's record; the worker, unfrozen, cannot
	// record its late outcome, and the retry runs the effect again.
	code, out, errOut = ctl("resolve", "-scope", scope, "-op", opCharge, "-key", "frozen-1", "-to", "released", "-reason", "no charge in the gateway")
	if code != exitOK || !strings.Contains(out, "PROCESSING") || !strings.Contains(out, "released") || !strings.Contains(errOut, "this line is all that remains of it") {
		t.Fatalf("resolve released: exit %d\n%s\n%s", code, out, errOut)
	}
	close(unfreeze)
	if err := <-frozenDone; !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("the frozen worker's late completion: %v, want ErrLeaseLost", err)
	}
	resp, err = runtime.Do(sctx, rt, runtime.Call[chargeReq, chargeResp]{Operation: opCharge, Key: "frozen-1", Request: chargeReq{Amount: 9}, Effect: again})
	if err != nil || resp.ChargeID != "ch_again" || ranAgain != 1 {
		t.Fatalf("retry after released: %+v, %v, ran %d", resp, err, ranAgain)
	}
	if code, out, _ := ctl("list", "-scope", scope, "-json"); code != exitOK || out != "" {
		t.Fatalf("records left to resolve: %s", out)
	}
}

func mustRun(t *testing.T, ctl func(...string) (int, string, string), args ...string) string {
	t.Helper()
	code, out, errOut := ctl(args...)
	if code != exitOK {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func decodeLines(t *testing.T, out string) []recordJSON {
	t.Helper()
	var recs []recordJSON
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r recordJSON
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %v: %s", err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

func keysOf(recs []recordJSON) string {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return strings.Join(keys, " ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// -redis-cluster also takes a URL (for credentials and options).
func TestClusterURL(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	u := "redis://" + addrs[0] + "?dial_timeout=3s"
	for _, a := range addrs[1:] {
		u += "&addr=" + a
	}
	code, out, errOut := runFor(t, nil, "list", "-redis-cluster", u, "-scope", "idemctl-e2e/none-"+suffix())
	if code != exitOK || out != "" || !strings.Contains(errOut, "no records match") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
}

// hookStore runs a hook once, right after the first Get: another process
// acting between runtime.Resolve's read and its claim.
type hookStore struct {
	runtime.Store
	hook func()
	done bool
}

func (s *hookStore) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if !s.done {
		s.done = true
		s.hook()
	}
	return rec, err
}

// TestResolveRacesOnRealStores checks runtime.Resolve's race paths on the
// real stores: what it creates by accident it releases, what it takes by
// accident it hands back, and what another took it leaves alone.
func TestResolveRacesOnRealStores(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store, _ := b.open(t)
			ctx := context.Background()
			sfx := suffix()
			scope, op := "idemctl-e2e-race/"+sfx, "Idemctl"+sfx+".Charge"
			req := []byte(`{"amount":5}`)
			fp := runtime.Fingerprint(req)
			unknown := func(key string) runtime.Identity {
				t.Helper()
				id := runtime.Identity{Scope: scope, Operation: op, Key: key}
				res, err := store.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: "w-" + sfx, Lease: time.Minute})
				if err != nil || !res.Claimed {
					t.Fatalf("claim: %+v, %v", res, err)
				}
				if _, err := store.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w-" + sfx,
					Version: res.Record.Version, To: runtime.StateUnknown, Token: "w#" + key}); err != nil {
					t.Fatal(err)
				}
				return id
			}
			acquire := func() runtime.Record {
				t.Helper()
				recs, err := store.AcquirePending(ctx, runtime.AcquireParams{Owner: "rec-" + sfx, Lease: time.Minute, Limit: 10, Operations: []string{op}})
				if err != nil || len(recs) != 1 {
					t.Fatalf("acquire: %v, %v", recs, err)
				}
				return recs[0]
			}
			resolve := func(id runtime.Identity, hook func()) error {
				_, err := runtime.Resolve(ctx, &hookStore{Store: store, hook: hook}, runtime.Resolution{
					ID: id, To: runtime.ResolveSuccess, Response: []byte(`{"charge_id":"ch_x"}`), Reason: "race test", Owner: "idemctl:race-" + sfx,
				})
				return err
			}

			// A reconciler acquires it: refused, the reconciler keeps it.
			id := unknown("acquired")
			err := resolve(id, func() { acquire() })
			if !errors.Is(err, runtime.ErrNotResolvable) || !errors.Is(err, runtime.ErrInProgress) {
				t.Fatalf("acquired in between: %v", err)
			}
			if rec, err := store.Get(ctx, id); err != nil || rec.Owner != "rec-"+sfx {
				t.Fatalf("after: %+v, %v", rec, err)
			}

			// It vanishes: the record the claim created is released at once.
			id = unknown("vanished")
			err = resolve(id, func() {
				r := acquire()
				if err := store.Release(ctx, runtime.ReleaseParams{ID: id, State: runtime.StateUnknown, Owner: "rec-" + sfx, Version: r.Version}); err != nil {
					t.Fatal(err)
				}
			})
			if !errors.Is(err, runtime.ErrNotResolvable) || !errors.Is(err, runtime.ErrNotFound) || !strings.Contains(err.Error(), "vanished") {
				t.Fatalf("vanished in between: %v", err)
			}
			if _, err := store.Get(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
				t.Fatalf("the record the claim created is still there: %v", err)
			}

			// Another life whose worker died: never taken (the take names
			// the version read), and a retry takes it over.
			id = unknown("replaced")
			err = resolve(id, func() {
				r := acquire()
				if err := store.Release(ctx, runtime.ReleaseParams{ID: id, State: runtime.StateUnknown, Owner: "rec-" + sfx, Version: r.Version}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond) // a later creation time
				if res, err := store.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: "w2-" + sfx, Lease: 50 * time.Millisecond}); err != nil || !res.Claimed {
					t.Fatalf("claim: %+v, %v", res, err)
				}
				time.Sleep(80 * time.Millisecond)
			})
			if !errors.Is(err, runtime.ErrNotResolvable) || !strings.Contains(err.Error(), "changed while it was being taken") {
				t.Fatalf("replaced in between: %v", err)
			}
			waitFor(t, "the dead worker's lease to end", func() bool {
				rec, err := store.Get(ctx, id)
				return err == nil && rec.State == runtime.StateProcessing && rec.Owner == "w2-"+sfx && !rec.LeaseLive()
			})
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			resp, err := runtime.Do(runtime.WithScope(ctx, scope), rt, runtime.Call[chargeReq, chargeResp]{Operation: op, Key: "replaced", Request: chargeReq{Amount: 5},
				Effect: func(context.Context, chargeReq) (chargeResp, error) {
					ran = true
					return chargeResp{ChargeID: "ch_retry"}, nil
				}})
			if err != nil || !ran || resp.ChargeID != "ch_retry" {
				t.Fatalf("retry after the hand-back: %+v, ran %v, %v", resp, ran, err)
			}
		})
	}
}
