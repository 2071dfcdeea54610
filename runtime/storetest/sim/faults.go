package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Faults are the rates of injected faults: per mille of store calls, of
// deliveries or of queries, as each field says.
type Faults struct {
	// Per store call (Claim, Get, Transition, Renew, Release, AcquirePending).
	StoreErrorBefore int // a transient error; the store is not called
	StoreReplyLost   int // the store applies the call; its reply is lost (transient timeout)
	StoreSlow        int // the call is delayed by up to a lease
	// Per lease renewal: the store applies it and its reply comes up to
	// half a lease late (or never, when the renewal's deadline comes
	// first), and the worker's next renewals fail for a lease after it: a
	// lease counted from the reply would outlast the store's.
	RenewReplyLate int
	// Per delivery.
	Pause            int // the worker pauses past its lease (effect and renewals frozen)
	Die              int // the worker dies mid-effect
	LostReply        int // the downstream applied the effect, its reply is lost (a timeout)
	TimeoutBefore    int // the effect times out before reaching the downstream
	Retryable        int // the effect fails retryably before reaching the downstream
	Permanent        int // the downstream declines: a permanent failure, nothing applied
	Unclassified     int // an unclassified error before reaching the downstream
	CancelClaim      int // the caller's context is cancelled during the claim
	CancelEffect     int // ... during the effect, after the downstream applied it
	CancelCompletion int // ... during the completion
	// Per query.
	SlowQuery    int // the query takes 1.5 leases
	UnknownQuery int // the query answers Unknown
	// QueryLag keeps a new effect invisible to the query (it answers
	// Unknown) for this long.
	QueryLag time.Duration
	// Per request.
	LargeResponse int // the response is larger than the store's record limit
	KeyReuse      int // the request reuses a key with another payload
	Storm         int // a takeover storm: a delivery dies or pauses, others follow a lease apart
	// Per run: clock jumps (with Config.Clock) or store-wide stalls
	// (without), each longer than a lease.
	Jumps int
}

// DefaultFaults are the rates a run uses when Config.Faults is nil.
func DefaultFaults() Faults {
	return Faults{
		StoreErrorBefore: 25, StoreReplyLost: 25, StoreSlow: 15, RenewReplyLate: 60,
		Pause: 60, Die: 25, LostReply: 90, TimeoutBefore: 40, Retryable: 50, Permanent: 40, Unclassified: 30,
		CancelClaim: 25, CancelEffect: 50, CancelCompletion: 25,
		SlowQuery: 200, UnknownQuery: 120, QueryLag: 0, // QueryLag defaults to a lease (see Config)
		LargeResponse: 40, KeyReuse: 120, Storm: 120, Jumps: 2,
	}
}

// errInjected marks the store errors the wrapper makes up.
var errInjected = errors.New("sim: injected store fault")

// timeoutError is a net.Error-like timeout.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

// faultStore wraps the store under test for one worker: it injects store
// faults, shields the store from the caller's cancellation (so that every
// call's outcome is known) and records the history.
type faultStore struct {
	runtime.Store
	s      *sim
	worker string
}

type storeDecision int

const (
	decNone storeDecision = iota
	decErrBefore
	decReplyLost
	decSlow
)

func (f *faultStore) decide(ctx context.Context, what string) (storeDecision, *call) {
	c := callFrom(ctx)
	if !f.s.faultsOn.Load() {
		return decNone, c
	}
	h := f.s.roll(c, "store")
	fl := f.s.faults
	switch p := int(h % 1000); {
	case p < fl.StoreErrorBefore:
		f.s.count("store error before " + what)
		f.s.callFault(c, "store error before "+what)
		return decErrBefore, c
	case p < fl.StoreErrorBefore+fl.StoreReplyLost:
		f.s.count("store reply lost on " + what)
		f.s.callFault(c, "store reply lost on "+what)
		return decReplyLost, c
	case p < fl.StoreErrorBefore+fl.StoreReplyLost+fl.StoreSlow:
		f.s.count("store slow on " + what)
		f.s.callFault(c, "store slow on "+what)
		return decSlow, c
	}
	return decNone, c
}

// around runs one store call: stall gate, fault decision, the call shielded
// from cancellation, then the reply (lost or not).
func (f *faultStore) around(ctx context.Context, what string, fn func(context.Context) error) (*call, error) {
	if what != "renew" {
		f.s.waitStall()
	}
	if err := ctx.Err(); err != nil {
		return callFrom(ctx), err
	}
	dec, c := f.decide(ctx, what)
	switch dec {
	case decErrBefore:
		return c, fmt.Errorf("%w: %s: connection refused", errInjected, what)
	case decSlow:
		if what == "renew" {
			break
		}
		f.s.sleep(time.Duration(f.s.roll(c, "slow")%uint64(f.s.cfg.Lease)) + time.Millisecond)
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := fn(ictx)
	cancel()
	if dec == decReplyLost {
		return c, fmt.Errorf("%w: %s: %w", errInjected, what, &timeoutError{"i/o timeout (reply lost)"})
	}
	if err == nil {
		if cerr := ctx.Err(); cerr != nil {
			// Applied, but the caller is gone: its deadline passed while
			// the store worked (a stalled process or server), as a real
			// client's would. Not injected, so counted with faults on or
			// off (the final retries run without injected faults).
			if c != nil {
				f.s.count(what + " answered after the caller's deadline")
				f.s.callFault(c, what+" answered after the caller's deadline")
			}
			return c, cerr
		}
	}
	return c, err
}

func classOf(err error) (errClass, bool) {
	switch {
	case err == nil:
		return errNone, true
	case errors.Is(err, runtime.ErrLeaseLost):
		return errLeaseLost, true
	case errors.Is(err, runtime.ErrNotFound):
		return errNotFound, true
	case errors.Is(err, runtime.ErrTooLarge):
		return errTooLarge, true
	}
	return errNone, false
}

func callID(c *call) int {
	if c == nil {
		return -1
	}
	return c.id
}

func (f *faultStore) who(c *call) string {
	if c == nil {
		return f.worker
	}
	return fmt.Sprintf("%s call %d", f.worker, c.id)
}

// Claim implements [runtime.Store].
func (f *faultStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	var res runtime.ClaimResult
	var ierr error
	if c := callFrom(ctx); c != nil && c.plan.cancel == cancelClaim && f.s.faultsOn.Load() && c.cancelOnce() {
		f.s.count("cancel during claim")
		f.s.callFault(c, "cancel during claim")
		if f.s.roll(c, "cancel")%2 == 0 { // the claim is applied; the caller is gone
			tick := f.s.rec.now()
			res, ierr = f.Store.Claim(context.WithoutCancel(ctx), p)
			f.recordClaim(ctx, tick, p, res, ierr, c)
		}
		return runtime.ClaimResult{}, context.Cause(ctx)
	}
	var tick int64
	c, err := f.around(ctx, "claim", func(ictx context.Context) error {
		tick = f.s.rec.now()
		res, ierr = f.Store.Claim(ictx, p)
		f.recordClaim(ctx, tick, p, res, ierr, callFrom(ctx))
		return ierr
	})
	if err != nil {
		return runtime.ClaimResult{}, err
	}
	if c != nil {
		c.sawClaim(p, res)
		f.s.observe(c, p.ID, res.Record.Version)
	}
	return res, nil
}

func (f *faultStore) recordClaim(ctx context.Context, tick int64, p runtime.ClaimParams, res runtime.ClaimResult, err error, c *call) {
	in := histIn{kind: opClaim, owner: p.Owner, fp: string(p.Fingerprint), acquireUnknown: p.AcquireUnknown, who: f.who(c), call: callID(c)}
	cl, ok := classOf(err)
	if !ok || cl == errLeaseLost || cl == errNotFound {
		f.s.rec.markAmbiguous(p.ID, fmt.Sprintf("claim failed: %v", err))
		return
	}
	out := histOut{err: cl, claimed: res.Claimed}
	if err == nil {
		out.rec = viewOf(res.Record)
	}
	f.s.rec.record(p.ID, tick, in, out)
}

// Get implements [runtime.Store].
func (f *faultStore) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	var rec runtime.Record
	c, err := f.around(ctx, "get", func(ictx context.Context) error {
		tick := f.s.rec.now()
		var ierr error
		rec, ierr = f.Store.Get(ictx, id)
		f.recordRead(ctx, tick, id, rec, ierr)
		return ierr
	})
	if err == nil && c != nil {
		c.sawRecord(rec)
	}
	return rec, err
}

func (f *faultStore) recordRead(ctx context.Context, tick int64, id runtime.Identity, rec runtime.Record, err error) {
	c := callFrom(ctx)
	cl, ok := classOf(err)
	if !ok || cl == errLeaseLost || cl == errTooLarge {
		f.s.rec.markAmbiguous(id, fmt.Sprintf("get failed: %v", err))
		return
	}
	out := histOut{err: cl}
	if err == nil {
		out.rec = viewOf(rec)
		if c != nil {
			f.s.observe(c, id, rec.Version)
		}
	}
	f.s.rec.record(id, tick, histIn{kind: opGet, who: f.who(c), call: callID(c)}, out)
}

// Transition implements [runtime.Store].
func (f *faultStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	c := callFrom(ctx)
	if c != nil && c.plan.cancel == cancelCompletion && f.s.faultsOn.Load() && c.cancelOnce() {
		f.s.count("cancel during completion")
		f.s.callFault(c, "cancel during completion")
	}
	var v int64
	_, err := f.around(ctx, "transition", func(ictx context.Context) error {
		tick := f.s.rec.now()
		var ierr error
		v, ierr = f.Store.Transition(ictx, p)
		in := histIn{kind: opTransition, from: p.From, to: p.To, owner: p.Owner, version: p.Version, newOwner: p.NewOwner,
			lease: p.Lease > 0, resp: string(p.Response), omitted: p.ResponseOmitted, token: p.Token, who: f.who(c), call: callID(c)}
		if p.To.Final() && p.Response == nil {
			in.resp = ""
		}
		cl, ok := classOf(ierr)
		if !ok || cl == errNotFound {
			f.s.rec.markAmbiguous(p.ID, fmt.Sprintf("transition failed: %v", ierr))
			return ierr
		}
		f.s.rec.record(p.ID, tick, in, histOut{err: cl, v: v})
		if ierr == nil && c != nil {
			f.s.observe(c, p.ID, v)
			if p.To == runtime.StateSuccess {
				c.recordedSuccess(p.Response)
			}
		}
		return ierr
	})
	if err == nil && c != nil && p.To == runtime.StateSuccess {
		c.successAnswered()
	}
	return v, err
}

// Renew implements [runtime.Store]. The renewals of a paused or dead
// worker, and every renewal during a store stall, fail without reaching the
// store. Renewals are not slowed before the store applies them (for the
// lease, a renewal that has not reached the store and a failed one are the
// same); one applied may answer late (RenewReplyLate): the runtime's
// renewals run in goroutines of their own, which a sleep blocks durably.
func (f *faultStore) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	c := callFrom(ctx)
	if c != nil {
		if until := c.frozenUntil.Load(); until != nil && time.Now().Before(*until) {
			return time.Time{}, fmt.Errorf("%w: renew: the worker is paused", errInjected)
		}
		if c.dead.Load() {
			return time.Time{}, fmt.Errorf("%w: renew: the worker is dead", errInjected)
		}
		if until := c.renewDownUntil.Load(); until != nil && time.Now().Before(*until) {
			return time.Time{}, fmt.Errorf("%w: renew: connection reset", errInjected)
		}
	}
	if until := f.s.stallUntil.Load(); until != nil && time.Now().Before(*until) {
		return time.Time{}, fmt.Errorf("%w: renew: the store is stalled", errInjected)
	}
	var t time.Time
	_, err := f.around(ctx, "renew", func(ictx context.Context) error {
		tick := f.s.rec.now()
		var ierr error
		t, ierr = f.Store.Renew(ictx, p)
		cl, ok := classOf(ierr)
		if !ok || cl == errNotFound || cl == errTooLarge {
			f.s.rec.markAmbiguous(p.ID, fmt.Sprintf("renew failed: %v", ierr))
			return ierr
		}
		f.s.rec.record(p.ID, tick, histIn{kind: opRenew, from: p.State, owner: p.Owner, version: p.Version, who: f.who(c), call: callID(c)},
			histOut{err: cl, lease: nanos(t)})
		return ierr
	})
	if err == nil && f.s.faultsOn.Load() {
		if h := f.s.roll(c, "renew-late"); int(h%1000) < f.s.faults.RenewReplyLate {
			f.s.count("renew reply late")
			f.s.callFault(c, "renew reply late")
			d := time.Duration(f.s.roll(c, "renew-late-by")%uint64(f.s.cfg.Lease/2)) + time.Millisecond
			if c != nil {
				down := time.Now().Add(d + f.s.cfg.Lease)
				c.renewDownUntil.Store(&down)
			}
			late := time.NewTimer(d)
			defer late.Stop()
			select {
			case <-late.C:
			case <-ctx.Done():
				return time.Time{}, fmt.Errorf("renew: applied, reply lost: %w", context.Cause(ctx))
			}
		}
	}
	return t, err
}

// Release implements [runtime.Store].
func (f *faultStore) Release(ctx context.Context, p runtime.ReleaseParams) error {
	c := callFrom(ctx)
	_, err := f.around(ctx, "release", func(ictx context.Context) error {
		tick := f.s.rec.now()
		ierr := f.Store.Release(ictx, p)
		cl, ok := classOf(ierr)
		if !ok || cl == errNotFound || cl == errTooLarge {
			f.s.rec.markAmbiguous(p.ID, fmt.Sprintf("release failed: %v", ierr))
			return ierr
		}
		f.s.rec.record(p.ID, tick, histIn{kind: opRelease, from: p.State, owner: p.Owner, version: p.Version, who: f.who(c), call: callID(c)}, histOut{err: cl})
		return ierr
	})
	return err
}

// AcquirePending implements [runtime.Store].
func (f *faultStore) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	var recs []runtime.Record
	_, err := f.around(ctx, "acquire", func(ictx context.Context) error {
		tick := f.s.rec.now()
		var ierr error
		recs, ierr = f.Store.AcquirePending(ictx, p)
		if ierr != nil {
			f.s.allAmbiguous(fmt.Sprintf("acquire failed: %v", ierr))
			return ierr
		}
		for _, r := range recs {
			f.s.rec.record(r.ID, tick, histIn{kind: opAcquire, owner: p.Owner, who: f.worker, call: -1}, histOut{rec: viewOf(r)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// Sweep implements [runtime.Store]. Its effect on each identity is in the
// model (a finished record may vanish once its TTL may have passed).
func (f *faultStore) Sweep(ctx context.Context, limit int) (int, error) {
	var n int
	_, err := f.around(ctx, "sweep", func(ictx context.Context) error {
		var ierr error
		n, ierr = f.Store.Sweep(ictx, limit)
		return ierr
	})
	return n, err
}

// LimitStore refuses records larger than Limit with runtime.ErrTooLarge,
// for stores that have no limit of their own (memstore), as PostgreSQL and
// Redis do.
type LimitStore struct {
	runtime.Store
	Limit int
}

// Transition refuses a response over the limit.
func (l LimitStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response) > l.Limit {
		return 0, fmt.Errorf("%w: response is %d bytes, the limit is %d", runtime.ErrTooLarge, len(p.Response), l.Limit)
	}
	return l.Store.Transition(ctx, p)
}
