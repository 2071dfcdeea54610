package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Walk returns a random walk of n steps of c from its initial state,
// seeded by seed: the trace [Replay] runs against a store. When every
// actor is done and the clock can tell nothing more, a new round of calls
// starts on the same store (workers, reconciler and operator start over;
// the fault bounds stay spent).
func Walk(c Config, seed uint64, n int) []TraceStep {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := c.initial()
	if c.Lives == 1 {
		s.Life = maxLives - 1
		s.Rec.Life = s.Life
	}
	var trace []TraceStep
	for len(trace) < n {
		var next []TraceStep
		c.next(&s, func(st Step, ns *State) { next = append(next, TraceStep{Step: st, State: *ns}) })
		if len(next) == 0 {
			round := c.initial()
			round.Rec, round.Counter, round.Life, round.MaxSeen = s.Rec, s.Counter, s.Life, s.MaxSeen
			round.Crashes, round.Lost, round.QErr = s.Crashes, s.Lost, s.QErr
			if round == s {
				break // nothing can happen at all
			}
			s = round
			continue
		}
		t := next[rng.IntN(len(next))]
		trace = append(trace, t)
		s = t.State
	}
	return trace
}

// ReplayConfig says how a trace meets a real store.
type ReplayConfig struct {
	Store runtime.Store
	// ID is the identity the trace's record has; its operation should be
	// unique to the trace, since AcquirePending is restricted to it (a
	// shared database may hold other tests' records).
	ID runtime.Identity
	// Tick is how long a tick lasts: a lease of L ticks is written as
	// (L - 1/2) ticks, so that a store's clock read within half a tick of
	// the model's tick agrees with it.
	Tick time.Duration
	// Advance moves the store's clock by one tick (a fake clock's Add, or
	// a sleep for a store on the real clock).
	Advance func()
	// SweepShared: the store holds other records, so Sweep may delete more
	// than the model's one.
	SweepShared bool
	// Late, when set, reports that the store's clock may be half a tick
	// or more past the model's (a store on the real clock, a slow step):
	// Replay then stops with [ErrInconclusive].
	Late func() bool
}

// ErrInconclusive is returned by [Replay] when a step ran too late for the
// store's clock to agree with the model's.
var ErrInconclusive = errors.New("model: replay inconclusive: a step ran half a tick late")

// Replay runs the store operations of trace against rc.Store and compares
// every result, and the record read back after every step, with the
// model's. Versions are compared by order (the model's version i maps to
// the store's i-th distinct version, which must increase with it).
func Replay(ctx context.Context, rc ReplayConfig, trace []TraceStep) error {
	r := replayer{rc: rc, vers: map[uint8]int64{}}
	for i, t := range trace {
		err := r.step(ctx, t)
		if rc.Late != nil && rc.Late() {
			return fmt.Errorf("step %d: %w", i+1, ErrInconclusive)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, t.Step, err)
		}
	}
	return nil
}

type replayer struct {
	rc   ReplayConfig
	vers map[uint8]int64
	last int64
}

func (r *replayer) dur(ticks int) time.Duration {
	if ticks <= 0 {
		return 0
	}
	return time.Duration(ticks)*r.rc.Tick - r.rc.Tick/2
}

func ownerID(o int8) string {
	if o == NoOwner {
		return ""
	}
	return ownerName(o)
}

func tokenID(t uint8) string {
	if t == 0 {
		return ""
	}
	return fmt.Sprintf("t%d", t)
}

// ver maps a model version to the store's, learning it on first sight.
func (r *replayer) ver(model uint8, real int64) error {
	if v, ok := r.vers[model]; ok {
		if v != real {
			return fmt.Errorf("model v%d is store version %d, now %d", model, v, real)
		}
		return nil
	}
	if real <= r.last {
		return fmt.Errorf("model v%d (new) is store version %d, not above %d", model, real, r.last)
	}
	r.vers[model], r.last = real, real
	return nil
}

// storeVer is the store version of model version v (0 when never seen: a
// compare-and-set on it must fail).
func (r *replayer) storeVer(v uint8) int64 { return r.vers[v] }

func (r *replayer) step(ctx context.Context, t TraceStep) error {
	st, rc := t.Step, &r.rc
	if st.Actor == env && st.What == "tick" {
		rc.Advance()
		return r.compare(ctx, t.State.Rec)
	}
	op, want := st.Op, st.Res
	id := rc.ID
	var err error
	switch op.Kind {
	case OpNone:
		return nil
	case OpClaim:
		var res runtime.ClaimResult
		p := runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte(`{}`),
			Owner: ownerID(op.Owner), Lease: r.dur(int(op.Lease)), AcquireUnknown: op.AcquireUnknown}
		if op.Ver != 0 {
			p.IfVersion = r.storeVer(op.Ver)
		}
		res, err = rc.Store.Claim(ctx, p)
		if err == nil {
			if res.Claimed != want.Claimed {
				return fmt.Errorf("claimed %v, model %v", res.Claimed, want.Claimed)
			}
			err = r.record(res.Record, want.Rec)
		}
	case OpGet:
		var rec runtime.Record
		rec, err = rc.Store.Get(ctx, id)
		switch {
		case want.Err == ErrNotFound:
			if !errors.Is(err, runtime.ErrNotFound) {
				return fmt.Errorf("get: %v, model ErrNotFound", err)
			}
			err = nil
		case err == nil:
			err = r.record(rec, want.Rec)
		}
	case OpTransition:
		tp := runtime.TransitionParams{ID: id, From: runtime.State(op.From.String()), Owner: ownerID(op.Owner), Version: r.storeVer(op.Ver),
			To: runtime.State(op.To.String()), NewOwner: ownerID(op.NewOwner), Lease: r.dur(int(op.Lease)), Token: tokenID(op.Token)}
		if op.To.Final() {
			tp.TTL, tp.Response = r.dur(int(op.TTL)), []byte(`{}`)
			if op.TTL == neverExpires {
				tp.TTL = time.Hour
			}
		}
		if op.GaveUp {
			tp.Note = "gave up"
		}
		if op.KeepNote {
			// The runtime writes the note of the record it asked under;
			// the store's record at the version the write checks.
			if cur, gerr := rc.Store.Get(ctx, id); gerr == nil && cur.Version == tp.Version {
				tp.Note = cur.Note
			}
		}
		var v int64
		v, err = rc.Store.Transition(ctx, tp)
		err = r.casErr(err, want.Err)
		if err == nil && want.Err == OK {
			err = r.ver(want.Ver, v)
		}
	case OpRenew:
		_, err = rc.Store.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.State(op.From.String()), Owner: ownerID(op.Owner),
			Version: r.storeVer(op.Ver), Lease: r.dur(int(op.Lease))})
		err = r.casErr(err, want.Err)
	case OpRelease:
		err = rc.Store.Release(ctx, runtime.ReleaseParams{ID: id, State: runtime.State(op.From.String()), Owner: ownerID(op.Owner), Version: r.storeVer(op.Ver)})
		err = r.casErr(err, want.Err)
	case OpAcquire:
		var recs []runtime.Record
		recs, err = rc.Store.AcquirePending(ctx, runtime.AcquireParams{Owner: ownerID(op.Owner), Lease: r.dur(int(op.Lease)), Limit: 10,
			MaxAttempts: int32(op.MaxAttempts), Operations: []string{id.Operation}})
		if err == nil {
			switch {
			case (len(recs) == 1) != (want.Rec.St != Absent) || len(recs) > 1:
				return fmt.Errorf("acquired %d records, model %v", len(recs), want.Rec.St != Absent)
			case len(recs) == 1:
				err = r.record(recs[0], want.Rec)
			}
		}
	case OpSweep:
		var n int
		n, err = rc.Store.Sweep(ctx, 100)
		if err == nil && (n < want.N || (!rc.SweepShared && n != want.N)) {
			return fmt.Errorf("swept %d, model %d", n, want.N)
		}
	}
	if err != nil {
		return err
	}
	return r.compare(ctx, t.State.Rec)
}

func (r *replayer) casErr(err error, want Err) error {
	switch {
	case want == ErrLeaseLost && errors.Is(err, runtime.ErrLeaseLost), want == OK && err == nil:
		return nil
	case err == nil:
		return fmt.Errorf("store: ok, model %s", want)
	}
	return fmt.Errorf("store: %w, model %s", err, want)
}

// compare reads the record back and compares it with the model's.
func (r *replayer) compare(ctx context.Context, want Rec) error {
	rec, err := r.rc.Store.Get(ctx, r.rc.ID)
	if want.St == Absent {
		if !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("read back: %v (%s), model absent", err, rec.State)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := r.record(rec, want); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	return nil
}

// record compares a store record with the model's.
func (r *replayer) record(rec runtime.Record, want Rec) error {
	live := want.Lease > 0
	expired := want.St.Final() && want.TTL == 0
	got := fmt.Sprintf("%s owner=%q live=%v attempts=%d takeovers=%d token=%q gaveUp=%v expired=%v",
		rec.State, rec.Owner, rec.LeaseLive(), rec.Attempts, min(rec.Takeovers, 2), rec.Token, rec.Note != "",
		rec.State.Final() && !rec.ExpiresAt.After(rec.StoreNow))
	exp := fmt.Sprintf("%s owner=%q live=%v attempts=%d takeovers=%d token=%q gaveUp=%v expired=%v",
		want.St, ownerID(want.Owner), live, want.Attempts, want.Takeovers, tokenID(want.Token), want.GaveUp, expired)
	if got != exp {
		return fmt.Errorf("record %s\n  model %s", got, exp)
	}
	return r.ver(want.Ver, rec.Version)
}
