package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/overlap"
	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
)

// renewLease is the lease of the renewal cases: long enough for loopback
// stores to answer well inside a third of it.
const renewLease = 600 * time.Millisecond

// renewFaults makes the runtime's lease renewals misbehave while every
// other store call works.
type renewFaults struct {
	runtime.Store
	// renew decides what renewal n (from 1) does: nil passes it to the
	// store.
	renew func(ctx context.Context, n int) error
	// replyLate, when not nil, holds back the reply of renewal n, once
	// the store has applied it, for the duration it returns.
	replyLate func(n int) time.Duration
	n         atomic.Int32
	// storeLate counts the renewals passed to the store that it did not
	// answer within answerWithin (or before their context ended): on a
	// loaded machine the server itself is starved, and the lease rule
	// then stops the effect as it must. answerWithin is a sixth of the
	// lease: half of the runtime's renewal interval, in which the lease
	// rule needs one answer, with a hedged retry.
	storeLate    atomic.Int32
	answerWithin time.Duration
	// delay holds every renewal back this long before it reaches the
	// store (a slow network). A renewal held back answerWithin or more
	// past it (this process's timers fired late: the scheduler was
	// starved, which the process-wide stall probe need not see) counts in
	// storeLate too: its lease rule had less room than the case gives it.
	delay time.Duration
	// lease is the case's lease; confirmedAt (Unix nanoseconds) is when
	// the last claim or renewal the store applied was passed to it.
	lease       time.Duration
	confirmedAt atomic.Int64
	// claimed is closed once a claim through this store was applied.
	claimed     chan struct{}
	claimedOnce sync.Once
}

func (s *renewFaults) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	sent := time.Now()
	res, err := s.Store.Claim(ctx, p)
	if err == nil {
		s.confirm(sent)
		s.claimedOnce.Do(func() { close(s.claimed) })
	}
	return res, err
}

// confirm notes a write passed to the store at sent and applied.
func (s *renewFaults) confirm(sent time.Time) {
	for {
		old := s.confirmedAt.Load()
		if sent.UnixNano() <= old || s.confirmedAt.CompareAndSwap(old, sent.UnixNano()) {
			return
		}
	}
}

func (s *renewFaults) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	entered := time.Now()
	n := int(s.n.Add(1))
	if s.delay > 0 {
		start := time.Now()
		if err := slow(ctx, s.delay); err != nil {
			// Its round's deadline (the lease less the rule's margin,
			// from the last write confirmed) came while it was held
			// back: a round that starts on time leaves two thirds of the
			// lease for a delay of a third, so this one started late, or
			// its hold's timer fired late (a starved scheduler; seen at a
			// load of 21 with the stall probe under a sixth of the
			// lease). Its lease rule had less room than the case gives
			// it. A deadline well before the round's (an attempt cut
			// short by the runtime itself) is not excused.
			confirmed := time.Unix(0, s.confirmedAt.Load())
			if dl, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) &&
				!dl.Before(confirmed.Add(s.lease*9/10-s.lease/6)) {
				s.storeLate.Add(1)
			}
			return time.Time{}, err
		}
		if time.Since(start) >= s.delay+s.answerWithin {
			s.storeLate.Add(1)
		}
	}
	if err := s.renew(ctx, n); err != nil {
		return time.Time{}, err
	}
	sent := time.Now()
	exp, err := s.Store.Renew(ctx, p)
	if time.Since(sent) >= s.answerWithin || (err != nil && ctx.Err() != nil) {
		s.storeLate.Add(1)
	}
	if err == nil {
		s.confirm(entered)
	}
	if s.replyLate != nil {
		if d := s.replyLate(n); d > 0 {
			if serr := slow(ctx, d); serr != nil {
				return time.Time{}, serr
			}
		}
	}
	return exp, err
}

// hang blocks until the renewal's context ends: a store that does not
// answer.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("renew: %w", ctx.Err())
}

// slow answers after d (or when the context ends).
func slow(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("renew: %w", ctx.Err())
	}
}

var errRenewRefused = errors.New("renew: connection refused")

// ownedEffect is an effect that lasts d, honours its context and records
// itself in o, which counts the effects that overlap.
func ownedEffect(o *overlap.Effects, d time.Duration) func(context.Context, chargeReq) (receipt, error) {
	return func(ctx context.Context, r chargeReq) (receipt, error) {
		if err := o.Run(ctx, d); err != nil {
			return receipt{}, err
		}
		return receipt{ID: "ch", Amount: r.Amount}, nil
	}
}

// testRenewals: a worker whose store answers keeps its lease however its
// renewals are delayed or time out once; a worker that cannot confirm its
// lease stops its effect (ErrLeaseLost) before the lease can expire, so
// two owners never overlap. A duplicate polls for a takeover throughout.
func testRenewals(t *testing.T, s runtime.Store) {
	tests := []struct {
		name  string
		renew func(ctx context.Context, n int) error
		// keeps: the first worker keeps its lease and records its outcome.
		keeps     bool
		replyLate func(n int) time.Duration
		// lease, when set, replaces renewLease: a case whose renewals
		// take a fixed share of the lease keeps that share with more
		// room for a loaded scheduler.
		lease time.Duration
		// delay holds every renewal back (see renewFaults.delay).
		delay time.Duration
	}{
		{"one renewal times out", func(ctx context.Context, n int) error {
			if n == 1 {
				return hang(ctx)
			}
			return nil
		}, true, nil, 0, 0},
		{"two renewals fail fast", func(ctx context.Context, n int) error {
			if n <= 2 {
				return errRenewRefused
			}
			return nil
		}, true, nil, 0, 0},
		{"every renewal takes a third of the lease", func(ctx context.Context, n int) error {
			return nil
		}, true, nil, 2 * renewLease, 2 * renewLease / 3},
		{"renewals time out, then fail, then time out", func(ctx context.Context, n int) error {
			switch n {
			case 1, 3:
				return hang(ctx)
			case 2:
				return errRenewRefused
			}
			return nil
		}, true, nil, 0, 0},
		{"the store never answers renewals", func(ctx context.Context, n int) error { return hang(ctx) }, false, nil, 0, 0},
		{"the store refuses every renewal", func(ctx context.Context, n int) error { return errRenewRefused }, false, nil, 0, 0},
		// The lease rule: a renewal confirms the lease from its sending.
		// The first is applied at once and its reply comes 0.45 lease
		// late; none answers after it. Counting from the reply would keep
		// the effect running 0.35 lease past the store's expiry, beside
		// the duplicate that takes over there.
		{"a renewal is applied and its reply comes late, then none answers", func(ctx context.Context, n int) error {
			if n > 1 {
				return hang(ctx)
			}
			return nil
		}, false, func(n int) time.Duration {
			if n == 1 {
				return renewLease * 45 / 100
			}
			return 0
		}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := scoped(t)
			lease := renewLease
			if tc.lease > 0 {
				lease = tc.lease
			}
			var o overlap.Effects
			effect := ownedEffect(&o, 3*lease) // three leases
			faulty := &renewFaults{Store: s, renew: tc.renew, replyLate: tc.replyLate, claimed: make(chan struct{}), answerWithin: lease / 6, delay: tc.delay, lease: lease}
			first := newRuntime(t, faulty, runtime.WithLease(lease), runtime.WithOwner("first"))
			dup := newRuntime(t, s, runtime.WithLease(lease), runtime.WithOwner("duplicate"), runtime.WithMaxWait(0))

			starved := stall.Start()
			done := make(chan error, 1)
			go func() {
				// The first call starts late, as under a loaded scheduler:
				// the duplicate must still not claim before it (it did
				// when it polled from a timer: the first call then
				// replayed the duplicate's outcome, or was told in
				// progress, and the case failed for the wrong reason).
				time.Sleep(50 * time.Millisecond)
				_, err := runtime.Do(ctx, first, call("k", chargeReq{"a", 1}, effect))
				done <- err
			}()
			// The duplicate asks every 20ms from the first call's claim
			// until the first call returns.
			var firstErr error
			var dupErrs []error
			select {
			case <-faulty.claimed:
			case firstErr = <-done:
				t.Fatalf("the first call returned before its claim was applied: %v", firstErr)
			}
		poll:
			for {
				select {
				case firstErr = <-done:
					break poll
				case <-time.After(20 * time.Millisecond):
					_, err := runtime.Do(ctx, dup, call("k", chargeReq{"a", 1}, effect))
					if err != nil && !errors.Is(err, runtime.ErrInProgress) {
						dupErrs = append(dupErrs, err)
					}
				}
			}
			ran, overlaps := o.Counts()
			worst := starved.Stop()
			// The lease rule stops the effect a tenth of the lease before
			// the lease can expire, on a timer of this process; a process
			// that did not run for longer than that margin (every core
			// busy) wakes with the lease expired at the store, and its
			// timer and the duplicate's poll (the duplicate runs in this
			// process too) race: the documented limit of a lease, which
			// fencing tokens close downstream. Only a process that ran on
			// time must never overlap.
			if overlaps > 0 && worst >= lease/10 {
				t.Logf("two owners overlapped while the process stalled for up to %v, past the lease rule's margin of %v (the machine's load): not counted", worst, lease/10)
				return
			}
			if overlaps > 0 {
				t.Fatalf("two owners ran the effect at once (%d effects; first call: %v; duplicate: %v); the process stalled for up to %v", ran, firstErr, dupErrs, worst)
			}
			// A process that did not run for a sixth of the lease (every
			// core busy) cannot confirm its lease in time when each
			// renewal already takes up to a third of it: the lease rule
			// then stops the effect, as it must. Only a process that ran
			// on time must keep its lease; no overlap holds either way.
			if tc.keeps && errors.Is(firstErr, runtime.ErrLeaseLost) && worst >= lease/6 {
				t.Logf("the lease was lost while the process stalled for up to %v (the machine's load): not counted: %v", worst, firstErr)
				return
			}
			// Likewise when the store did not answer a renewal the case
			// passed to it within a sixth of the lease: the server, not this
			// process, was starved (seen at a load of 14 on 2 cores).
			if late := faulty.storeLate.Load(); tc.keeps && errors.Is(firstErr, runtime.ErrLeaseLost) && late > 0 {
				t.Logf("the lease was lost while %d renewals went unanswered for %v or more past their planned delay (the machine's load): not counted: %v", late, faulty.answerWithin, firstErr)
				return
			}
			// A first call whose effect starts 0.9 of the lease after its
			// claim was sent (the process or the server starved: the effect
			// here starts at once) renews once before it (the late start);
			// that renewal meets the case's faults, and when it fails the
			// effect does not run: nothing ran, no overlap (checked above).
			// Seen at a load of 19 on 2 cores (bench/ciload.sh, run 1 at
			// f764a30).
			if tc.keeps && ran == 0 && firstErr != nil && strings.Contains(firstErr.Error(), lateStartFailed) {
				t.Logf("the first call started late (the machine's load; the process stalled for up to %v) and its late start's renewal failed, so the effect did not run: not counted: %v", worst, firstErr)
				return
			}
			if tc.keeps {
				if firstErr != nil || ran != 1 {
					t.Fatalf("the first call lost a lease its store kept answering for: %v (%d effects; duplicate: %v)", firstErr, ran, dupErrs)
				}
				return
			}
			// The lease rule stops the effect on a timer, before the lease
			// can expire; a process that did not run for a third of the
			// lease (every core busy) wakes with the effect's end and the
			// rule's deadline both past, and the effect may end first. Its
			// SUCCESS is then written by compare-and-set, which holds only
			// if nobody took the record over: no overlap (checked above),
			// one effect.
			if firstErr == nil && ran == 1 && worst >= lease/3 {
				t.Logf("the effect ended while the process stalled for up to %v (the machine's load), before the lease rule could stop it; its outcome was recorded by compare-and-set: not counted", worst)
				return
			}
			if !errors.Is(firstErr, runtime.ErrLeaseLost) && !errors.Is(firstErr, runtime.ErrOutcomeUnknown) {
				t.Fatalf("first call: %v, want its effect stopped (ErrLeaseLost, or UNKNOWN recorded); the process stalled for up to %v", firstErr, worst)
			}
		})
	}
}

// slowClaimReply applies a claim at once but delivers its reply late, as a
// congested network or a paused process would.
type slowClaimReply struct {
	runtime.Store
	delay time.Duration
	// release, when not nil, ends the delay instead.
	release <-chan struct{}
	// applied is closed when the claim has been applied.
	applied chan struct{}
}

func (s *slowClaimReply) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	close(s.applied)
	if s.release != nil {
		<-s.release
	} else {
		time.Sleep(s.delay)
	}
	return res, err
}

// testSlowClaimReply: a claim whose reply arrives after its lease expired
// (another worker took the record over meanwhile and is running the
// effect) must not start the effect: the worker first confirms its lease,
// and the confirmation fails. Found by the exhaustive model check.
func testSlowClaimReply(t *testing.T, s runtime.Store) {
	// The reply arrives two leases late, or as soon as the duplicate's
	// effect runs (a little over one lease late: the worker must confirm
	// its lease as soon as it may have expired, not only when it
	// certainly has).
	for _, whenDupRuns := range []bool{false, true} {
		t.Run(fmt.Sprintf("whenDupRuns=%v", whenDupRuns), func(t *testing.T) {
			ctx := scoped(t)
			var o overlap.Effects
			effect := ownedEffect(&o, renewLease)
			slow := &slowClaimReply{Store: s, delay: 2 * renewLease, applied: make(chan struct{})}
			dupRuns := make(chan struct{})
			var once sync.Once
			defer once.Do(func() { close(dupRuns) }) // never leave the first worker blocked
			dupEffect := effect
			if whenDupRuns {
				slow.release = dupRuns
				dupEffect = func(ctx context.Context, r chargeReq) (receipt, error) {
					once.Do(func() { close(dupRuns) })
					return effect(ctx, r)
				}
			}
			first := newRuntime(t, slow, runtime.WithLease(renewLease), runtime.WithOwner("slow-reply"))
			dup := newRuntime(t, s, runtime.WithLease(renewLease), runtime.WithOwner("duplicate"), runtime.WithMaxWait(0))
			done := make(chan error, 1)
			go func() {
				_, err := runtime.Do(ctx, first, call("k", chargeReq{"a", 1}, effect))
				done <- err
			}()
			<-slow.applied
			time.Sleep(renewLease + renewLease/4) // the first worker's lease expires
			var dupStarted atomic.Bool
			if _, err := runtime.Do(ctx, dup, call("k", chargeReq{"a", 1}, func(ctx context.Context, r chargeReq) (receipt, error) {
				dupStarted.Store(true)
				return dupEffect(ctx, r)
			})); err != nil {
				// On a loaded machine the duplicate's own renewals may go
				// unanswered and the lease rule stop its effect (seen in a
				// final check): the late claim must still not run it.
				if !errors.Is(err, runtime.ErrLeaseLost) || !dupStarted.Load() {
					t.Fatalf("the duplicate's takeover: %v", err)
				}
				t.Logf("the duplicate's own lease was lost under load after its effect started: %v", err)
			}
			err := <-done
			if ran, overlaps := o.Counts(); ran != 1 {
				t.Fatalf("the effect ran %d times (%d overlaps); the late claim's call returned %v", ran, overlaps, err)
			}
			// The late start's confirming renewal finds the takeover
			// (ErrLeaseLost); on a loaded server it may instead time out
			// (the store did not answer within a third of the lease): the
			// call then fails with the effect not run, as documented.
			if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, runtime.ErrLeaseLost) {
				t.Logf("the late claim's confirming renewal timed out (a slow store): %v", err)
				return
			}
			if !errors.Is(err, runtime.ErrLeaseLost) {
				t.Fatalf("the late claim's call: %v, want ErrLeaseLost", err)
			}
		})
	}
}

// lateStartFailed is what the runtime says when the renewal before a late
// effect (one starting 0.9 of the lease after its claim was sent) fails:
// the effect did not run.
const lateStartFailed = "the lease may have expired before the effect could start and renewing it failed; the effect did not run"
