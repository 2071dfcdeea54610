package doors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// quietTB collects a run's failures instead of failing the test.
type quietTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (q *quietTB) Errorf(format string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.errs = append(q.errs, fmt.Sprintf(format, args...))
}

func (q *quietTB) Error(args ...any) { q.Errorf("%s", fmt.Sprint(args...)) }

// brokenTakeover is a store bug the doors must catch: a claim that finds a
// live PROCESSING record of the same fingerprint takes it over anyway.
type brokenTakeover struct{ runtime.Store }

func (s brokenTakeover) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	r := res.Record
	if err != nil || res.Claimed || r.State != runtime.StateProcessing || !r.LeaseLive() || !bytes.Equal(r.Fingerprint, p.Fingerprint) {
		return res, err
	}
	v, err := s.Transition(ctx, runtime.TransitionParams{ID: p.ID, From: r.State, Owner: r.Owner, Version: r.Version,
		To: runtime.StateProcessing, NewOwner: p.Owner, Lease: p.Lease})
	if err != nil {
		return res, nil
	}
	r.Owner, r.Version, r.LeaseExpiresAt = p.Owner, v, r.StoreNow.Add(p.Lease)
	return runtime.ClaimResult{Claimed: true, Record: r}, nil
}

// TestCatchesDoubleEffects runs the Do door on a store that takes over
// live leases: concurrent duplicates both run the effect, and the run must
// report it and fail its test.
func TestCatchesDoubleEffects(t *testing.T) {
	// Whether a schedule overlaps two owners depends on the seed: the first
	// seeds are tried in turn until one does.
	for seed := uint64(1); seed <= 12; seed++ {
		q := &quietTB{TB: t}
		rep := Run(q, DoorDo, Config{Name: "broken", Store: brokenTakeover{memstore.New()}, Seed: seed, EnforceRecordLimit: true, NoStallExcuses: true})
		for _, v := range rep.Violations {
			if v.Invariant == "at-most-once" {
				if len(q.errs) == 0 {
					t.Error("the run reported a violation but did not fail its test")
				}
				t.Logf("seed %d: %s", seed, v)
				return
			}
		}
	}
	t.Error("a store that takes over live leases passed at-most-once on seeds 1 to 12")
}

// TestClassifyRuntime: what runtime.Do returns maps to the answer a client
// acts on.
func TestClassifyRuntime(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want kind
	}{
		{"success", context.Background(), nil, ansSuccess},
		{"not replayable", context.Background(), fmt.Errorf("x: %w", runtime.ErrNotReplayable), ansNotStored},
		{"key reused", context.Background(), runtime.ErrKeyReused, ansKeyReused},
		{"permanent", context.Background(), runtime.Permanent(errors.New("declined")), ansFailed},
		{"failed record", context.Background(), &runtime.FailedError{Message: "declined"}, ansFailed},
		{"in progress", context.Background(), runtime.ErrInProgress, ansLater},
		{"outcome unknown", context.Background(), runtime.ErrOutcomeUnknown, ansLater},
		{"lease lost", context.Background(), runtime.ErrLeaseLost, ansLater},
		{"caller's own deadline", done, fmt.Errorf("waiting: %w", context.Canceled), ansDeadline},
		{"handler timeout", context.Background(), wrappedErr(1), ansLater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyRuntime(tc.ctx, simpay.Receipt{}, tc.err).kind; got != tc.want {
				t.Errorf("classifyRuntime(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

// TestStallExcuses: only the documented consequences of a measured stall
// are excused, and only past their thresholds (lease 600 ms: the lease
// rule's margin is 60 ms, the late-start renewal's timeout 200 ms).
func TestStallExcuses(t *testing.T) {
	const lease = 600 * time.Millisecond
	for _, c := range []struct {
		door          string
		stall         time.Duration
		effects, lost int
		want          bool
	}{
		{DoorHTTP, 60 * time.Millisecond, 2, 1, true},
		{DoorGRPC, time.Second, 2, 1, true},
		{DoorGRPC, time.Second, 3, 2, true},
		{DoorHTTP, 59 * time.Millisecond, 2, 1, false}, // under the margin
		{DoorHTTP, time.Second, 2, 0, false},           // no lease lost
		{DoorGRPC, time.Second, 3, 1, false},           // more runs than leases lost
		{DoorDo, time.Second, 2, 1, true},              // the query came before the late effect
		{DoorGenerated, time.Second, 2, 1, true},
		{DoorDo, 59 * time.Millisecond, 2, 1, false},
		{DoorTx, time.Second, 2, 1, false}, // the effect commits with its record
	} {
		if got := secondEffectExcused(c.door, c.stall, lease, c.effects, c.lost); got != c.want {
			t.Errorf("secondEffectExcused(%s, stall %v, %d effects, %d lost) = %v, want %v", c.door, c.stall, c.effects, c.lost, got, c.want)
		}
	}
	late := "ERROR idemgrpc: the idempotency store failed; answered Unavailable err=idem: Op \"k\": " + lateStartText + "; the effect did not run: " + context.DeadlineExceeded.Error()
	failedWrite := "ERROR idemgrpc: the idempotency store failed; answered Unavailable err=idem: Op \"k\": the effect failed permanently (card declined) but recording it failed; the claim stays until its lease expires: " + context.DeadlineExceeded.Error()
	for _, c := range []struct {
		name  string
		stall time.Duration
		logs  []string
		want  bool
	}{
		{"late start in a long stall", 200 * time.Millisecond, []string{late}, true},
		{"late start in a short stall", 199 * time.Millisecond, []string{late}, false},
		{"another store error", time.Second, []string{"ERROR idemgrpc: the idempotency store failed; err=connection reset"}, false},
		{"late start and another", time.Second, []string{late, "ERROR idemgrpc: the idempotency store failed; err=connection reset"}, false},
		{"late start, renewal refused", time.Second, []string{strings.TrimSuffix(late, context.DeadlineExceeded.Error()) + "connection reset"}, false},
		{"a FAILED write timed out in a long stall", time.Second, []string{failedWrite}, true},
		{"a FAILED write timed out in a short stall", 199 * time.Millisecond, []string{failedWrite}, false},
		{"a FAILED write refused", time.Second, []string{strings.TrimSuffix(failedWrite, context.DeadlineExceeded.Error()) + "connection reset"}, false},
	} {
		r := &run{cfg: Config{Lease: lease}, stall: c.stall}
		if got := r.stalledWrite(&delivery{errorLogs: c.logs}); got != c.want {
			t.Errorf("%s: stalledWrite = %v, want %v", c.name, got, c.want)
		}
	}
	r := &run{cfg: Config{Lease: lease}, stall: time.Second}
	if !r.stalledWrite(&delivery{ans: answer{detail: late}}) {
		t.Error("runtime.Do's answer naming the late start in a stall: not excused")
	}
}
