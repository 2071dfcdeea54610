package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// lateRenewReply applies the first renewal at once and holds its reply
// back for delay; every later renewal is lost in the network (it never
// answers). The store's lease then ends at the first renewal's expiry.
type lateRenewReply struct {
	runtime.Store
	delay  time.Duration
	n      atomic.Int32
	expiry atomic.Pointer[time.Time] // what the first renewal granted
}

func (s *lateRenewReply) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.n.Add(1) > 1 {
		<-ctx.Done()
		return time.Time{}, ctx.Err()
	}
	exp, err := s.Store.Renew(ctx, p)
	if err == nil {
		s.expiry.Store(&exp)
	}
	select {
	case <-time.After(s.delay):
		return exp, err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// The lease rule: a renewal confirms the lease from when it was sent, not
// from when its reply came back. Schedule: the first renewal is applied by
// the store at once and its reply arrives 0.45 lease later; no renewal
// answers after it. The store's lease ends one lease after that renewal
// reached it; the worker must stop its effect a tenth of a lease before
// then. Trusting the reply's arrival instead would keep the effect running
// 0.35 lease past the store's expiry, beside a worker that took over. The
// bound checked is the expiry plus a tenth of a lease, for a loaded
// machine's timers.
func TestLeaseConfirmedFromTheRenewalsSending(t *testing.T) {
	const lease = 2 * time.Second
	store := &lateRenewReply{Store: memstore.New(), delay: lease * 45 / 100}
	rt, err := runtime.New(store, runtime.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	var stopped time.Time
	_, err = runtime.Do(reviewCtx(), rt, runtime.Call[reviewReq, string]{Operation: "Lease.LateReply", Key: "k", Request: reviewReq{1},
		Effect: func(ctx context.Context, r reviewReq) (string, error) {
			<-ctx.Done() // a long effect that honours its context
			stopped = time.Now()
			return "", context.Cause(ctx)
		}})
	if err == nil {
		t.Fatal("the effect's lease could not be confirmed, yet the call succeeded")
	}
	exp := store.expiry.Load()
	if exp == nil {
		t.Fatal("no renewal reached the store")
	}
	if late := stopped.Sub(*exp); late > lease/10 {
		t.Fatalf("the effect ran %v past the store's expiry of its lease (bound: a tenth of the lease): a takeover would have run beside it", late.Round(time.Millisecond))
	}
	t.Logf("effect stopped %v before the store's expiry", exp.Sub(stopped).Round(time.Millisecond))
}

// silentRenewals is a store whose renewals are all lost in the network:
// they never answer.
type silentRenewals struct{ runtime.Store }

func (silentRenewals) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// The lease rule's margin: a worker that cannot confirm its lease stops
// its effect a tenth of the lease before the lease could expire, so that a
// worker taking over at the store's expiry never runs beside it. Schedule:
// no renewal ever answers; the effect's context must be done by the
// claim's expiry in the store less half the margin (the other half is for
// a loaded machine's timers).
func TestLeaseMarginStopsTheEffectBeforeExpiry(t *testing.T) {
	const lease = 3 * time.Second
	mem := memstore.New()
	var mu sync.Mutex
	kinds := map[runtime.EventKind]int{}
	observe := runtime.ObserverFunc(func(_ context.Context, e runtime.Event) { mu.Lock(); kinds[e.Kind]++; mu.Unlock() })
	rt, err := runtime.New(silentRenewals{mem}, runtime.WithLease(lease), runtime.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	var stopped, expiry time.Time
	_, err = runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Lease.Margin", Key: "k", Request: reviewReq{1},
		Effect: func(ectx context.Context, r reviewReq) (string, error) {
			a, _ := runtime.AttemptFrom(ectx)
			rec, err := mem.Get(ctx, a.ID)
			if err != nil {
				return "", err
			}
			expiry = rec.LeaseExpiresAt
			<-ectx.Done()
			stopped = time.Now()
			return "", context.Cause(ectx)
		}})
	if err == nil {
		t.Fatal("no renewal answered, yet the call succeeded")
	}
	// Nobody took over: the outcome is unknown (the effect may have
	// happened), not a lease lost to another worker, for the caller and
	// for the observer.
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("effect stopped for want of a confirmed lease, nobody took over: %v; want ErrOutcomeUnknown", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if kinds[runtime.EventLeaseLost] > 0 || kinds[runtime.EventUnknown] == 0 {
		t.Fatalf("events %v: want EventUnknown and no EventLeaseLost (nobody took over)", kinds)
	}
	if expiry.IsZero() {
		t.Fatalf("the effect did not read its record: %v", err)
	}
	if early := expiry.Sub(stopped); early < lease/20 {
		t.Fatalf("the effect stopped %v before the store's expiry of its lease, want at least %v (the margin is %v)",
			early.Round(time.Millisecond), lease/20, lease/10)
	}
}

// takenRenewals is a store whose renewals find the lease taken over.
type takenRenewals struct{ runtime.Store }

func (takenRenewals) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	return time.Time{}, fmt.Errorf("renew %s: %w", p.ID.Key, runtime.ErrLeaseLost)
}

// A renewal that finds the lease taken over stops the effect at once, with
// ErrLeaseLost as its context's cause, not when the lease would have run
// out unconfirmed (a worker that took over is running the effect already).
func TestLeaseLostAtRenewalStopsTheEffect(t *testing.T) {
	const lease = 3 * time.Second
	rt, err := runtime.New(takenRenewals{memstore.New()}, runtime.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	var ran time.Duration
	var cause error
	_, err = runtime.Do(reviewCtx(), rt, runtime.Call[reviewReq, string]{Operation: "Lease.Taken", Key: "k", Request: reviewReq{1},
		Effect: func(ctx context.Context, r reviewReq) (string, error) {
			start := time.Now()
			select {
			case <-ctx.Done():
			case <-time.After(2 * lease):
			}
			ran, cause = time.Since(start), context.Cause(ctx)
			return "", cause
		}})
	if err == nil {
		t.Fatal("the lease was taken over, yet the call succeeded")
	}
	// The first renewal is due a third of the lease in; the unconfirmed
	// lease would stop the effect at nine tenths.
	if ran > lease*6/10 || !errors.Is(cause, runtime.ErrLeaseLost) {
		t.Fatalf("the effect ran %v (cause %v); want it stopped at the first renewal, a third of the lease in, with ErrLeaseLost", ran.Round(time.Millisecond), cause)
	}
}
