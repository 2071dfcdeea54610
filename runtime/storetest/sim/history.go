package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem/runtime"
)

// opKind is a store method in the recorded history.
type opKind int

const (
	opClaim opKind = iota
	opGet
	opTransition
	opRenew
	opRelease
	opAcquire
)

func (k opKind) String() string {
	switch k {
	case opClaim:
		return "Claim"
	case opGet:
		return "Get"
	case opTransition:
		return "Transition"
	case opRenew:
		return "Renew"
	case opRelease:
		return "Release"
	case opAcquire:
		return "AcquirePending"
	}
	return fmt.Sprintf("opKind(%d)", int(k))
}

// errClass is how a store call ended, for the model.
type errClass int

const (
	errNone errClass = iota
	errLeaseLost
	errNotFound
	errTooLarge
)

func (e errClass) String() string {
	switch e {
	case errNone:
		return "ok"
	case errLeaseLost:
		return "ErrLeaseLost"
	case errNotFound:
		return "ErrNotFound"
	case errTooLarge:
		return "ErrTooLarge"
	}
	return fmt.Sprintf("errClass(%d)", int(e))
}

// histIn is the input of one recorded store operation on one identity.
type histIn struct {
	kind           opKind
	owner          string
	fp             string
	acquireUnknown bool
	from, to       runtime.State // Transition; from is also Renew's and Release's state
	version        int64
	newOwner       string
	lease          bool // Transition with a lease
	resp           string
	omitted        bool   // Transition: SUCCESS with the response not stored
	token          string // Transition: the write's token (see runtime.TransitionParams.Token)
	who            string // worker and call, for descriptions
	call           int    // the delivery (-1: the reconciler)
}

// recView is a record as a store returned it; times in Unix nanoseconds.
type recView struct {
	found     bool
	st        runtime.State
	owner     string
	version   int64
	fp        string
	resp      string
	lease     int64
	expires   int64
	now       int64
	takeovers int32
	omitted   bool
	token     string
}

func viewOf(r runtime.Record) recView {
	return recView{
		found: true, st: r.State, owner: r.Owner, version: r.Version, fp: string(r.Fingerprint), resp: string(r.Response),
		lease: nanos(r.LeaseExpiresAt), expires: nanos(r.ExpiresAt), now: nanos(r.StoreNow), takeovers: r.Takeovers,
		omitted: r.ResponseOmitted, token: r.Token,
	}
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// histOut is the output of one recorded store operation.
type histOut struct {
	err     errClass
	claimed bool
	rec     recView
	v       int64 // Transition
	lease   int64 // Renew
}

// mstate is the model of one identity's record. maxVer outlives the record:
// versions never repeat.
type mstate struct {
	exists       bool
	st           runtime.State
	owner        string
	version      int64
	maxVer       int64
	fp           string
	resp         string
	lease        int64
	leaseKnown   bool
	expires      int64
	expiresKnown bool
	omitted      bool
	// token is the token of the Transition that last wrote the record ("" after
	// a claim or an acquisition): a retry of that very write is answered with
	// the current version instead of ErrLeaseLost.
	token string
	// lastToken and lastVer are the last Transition's token and the version
	// it wrote, kept across claims and acquisitions until the next
	// Transition or the record's deletion: a store may still recognise a
	// resend of that write after the record took a new version (Redis keeps
	// them apart, as go-redis resends a script seconds later) and answer
	// with the version it wrote; others answer ErrLeaseLost.
	lastToken string
	lastVer   int64
}

func (s mstate) String() string {
	if !s.exists {
		return fmt.Sprintf("absent(max v%d)", s.maxVer)
	}
	lease, exp := "?", "?"
	if s.leaseKnown {
		lease = fmt.Sprint(s.lease)
	}
	if s.expiresKnown {
		exp = fmt.Sprint(s.expires)
	}
	return fmt.Sprintf("%s owner=%q v%d (max v%d) fp=%s lease=%s expires=%s", s.st, s.owner, s.version, s.maxVer, short(s.fp), lease, exp)
}

func short(fp string) string {
	if len(fp) > 4 {
		return fmt.Sprintf("%x", fp[:4])
	}
	return fmt.Sprintf("%x", fp)
}

func (s mstate) held(st runtime.State, owner string, version int64) bool {
	return s.exists && s.st == st && s.owner == owner && s.version == version
}

func (s mstate) matches(r recView) bool {
	return s.exists && r.found && s.st == r.st && s.owner == r.owner && s.version == r.version && s.fp == r.fp &&
		s.token == r.token && (!s.st.Final() || (s.resp == r.resp && s.omitted == r.omitted))
}

func (s mstate) learn(r recView) mstate {
	s.lease, s.leaseKnown = r.lease, true
	s.expires, s.expiresKnown = r.expires, true
	return s
}

// Time-dependent predicates: "may" is true when the model cannot rule the
// branch out (time unknown), "must" only when it knows.
func (s mstate) leaseMayBeExpired(now int64) bool {
	return !s.leaseKnown || now == 0 || (s.lease != 0 && s.lease <= now)
}
func (s mstate) leaseMustBeExpired(now int64) bool {
	return s.leaseKnown && now != 0 && s.lease != 0 && s.lease <= now
}
func (s mstate) leaseMayBeFree(now int64) bool {
	return !s.leaseKnown || now == 0 || s.lease == 0 || s.lease <= now
}
func (s mstate) leaseMustBeFree(now int64) bool {
	return s.leaseKnown && now != 0 && (s.lease == 0 || s.lease <= now)
}
func (s mstate) ttlMayHavePassed(now int64) bool {
	return !s.expiresKnown || now == 0 || (s.expires != 0 && s.expires <= now)
}
func (s mstate) ttlMustHavePassed(now int64) bool {
	return s.expiresKnown && now != 0 && s.expires != 0 && s.expires <= now
}

// modelStep returns the states the record may be in after the operation, or
// none when the operation's output is impossible.
func modelStep(s0 mstate, in histIn, out histOut) []mstate {
	now := out.rec.now
	cands := []mstate{s0}
	if s0.exists && s0.st.Final() && s0.ttlMayHavePassed(now) {
		cands = append(cands, mstate{maxVer: s0.maxVer}) // swept, or expired by the store
	}
	var res []mstate
	for _, s := range cands {
		if ns, ok := step1(s, in, out); ok {
			res = append(res, ns)
		}
	}
	return res
}

func step1(s mstate, in histIn, out histOut) (mstate, bool) {
	r, now := out.rec, out.rec.now
	switch in.kind {
	case opClaim:
		if out.err == errTooLarge {
			return s, true
		}
		if out.err != errNone {
			return s, false
		}
		if !out.claimed {
			if !s.matches(r) {
				return s, false
			}
			switch {
			case s.st.Final() && s.ttlMustHavePassed(now):
				return s, false // a finished record past its TTL must be replaced
			case s.st == runtime.StateProcessing && s.fp == in.fp && s.leaseMustBeExpired(now):
				return s, false // an expired lease must be taken over
			case s.st == runtime.StateUnknown && in.acquireUnknown && s.fp == in.fp && s.leaseMustBeFree(now):
				return s, false // a free UNKNOWN record must be acquired
			}
			return s.learn(r), true
		}
		if !r.found || r.owner != in.owner || r.fp != in.fp || r.version <= s.maxVer {
			return s, false
		}
		switch {
		case !s.exists || (s.st.Final() && s.ttlMayHavePassed(now)):
			if r.st != runtime.StateProcessing {
				return s, false
			}
		case s.st == runtime.StateProcessing && s.fp == in.fp && s.leaseMayBeExpired(now):
			if r.st != runtime.StateProcessing {
				return s, false
			}
		case s.st == runtime.StateUnknown && in.acquireUnknown && s.fp == in.fp && s.leaseMayBeFree(now):
			if r.st != runtime.StateUnknown {
				return s, false
			}
		default:
			return s, false
		}
		ns := mstate{exists: true, st: r.st, owner: r.owner, version: r.version, maxVer: r.version, fp: r.fp}
		if s.exists {
			ns.lastToken, ns.lastVer = s.lastToken, s.lastVer
		}
		return ns.learn(r), true
	case opGet:
		if out.err == errNotFound {
			return s, !s.exists
		}
		if out.err != errNone || !s.matches(r) {
			return s, false
		}
		return s.learn(r), true
	case opAcquire:
		if out.err != errNone || !r.found || r.st != runtime.StateUnknown || r.owner != in.owner || r.version <= s.maxVer || !s.exists || r.fp != s.fp {
			return s, false
		}
		switch {
		case s.st == runtime.StateProcessing && s.leaseMayBeExpired(now):
		case s.st == runtime.StateUnknown && s.leaseMayBeFree(now):
		default:
			return s, false
		}
		ns := mstate{exists: true, st: r.st, owner: r.owner, version: r.version, maxVer: r.version, fp: r.fp,
			lastToken: s.lastToken, lastVer: s.lastVer}
		return ns.learn(r), true
	case opTransition:
		held := s.held(in.from, in.owner, in.version)
		if !held && in.token != "" && s.exists && s.token == in.token {
			// A retry of the write that put the record where it is: the
			// store recognises its token and answers with the version.
			return s, out.err == errNone && out.v == s.version
		}
		if !held && in.token != "" && s.exists && s.lastToken == in.token && out.err == errNone && out.v == s.lastVer {
			// A resend of the last transition, answered after a claim or
			// an acquisition took the record to a new version: the store
			// still recognises it (see lastToken). The writer's lease
			// ended before that takeover; the runtime counts it from the
			// first try's sending, and confirms it before starting an
			// effect.
			return s, true
		}
		switch out.err {
		case errLeaseLost:
			return s, !held
		case errTooLarge:
			return s, true
		case errNone:
		default:
			return s, false
		}
		if !held || out.v <= s.maxVer {
			return s, false
		}
		ns := s
		ns.st, ns.owner, ns.version, ns.maxVer = in.to, in.newOwner, out.v, out.v
		ns.lease, ns.leaseKnown = 0, !in.lease
		ns.token, ns.omitted = in.token, in.omitted
		ns.lastToken, ns.lastVer = in.token, out.v
		if in.to.Final() {
			ns.resp, ns.expires, ns.expiresKnown = in.resp, 0, false
		} else {
			ns.expires, ns.expiresKnown = 0, true
		}
		return ns, true
	case opRenew:
		held := s.held(in.from, in.owner, in.version)
		switch out.err {
		case errLeaseLost:
			return s, !held
		case errNone:
			if !held {
				return s, false
			}
			s.lease, s.leaseKnown = out.lease, true
			return s, true
		}
		return s, false
	case opRelease:
		held := s.held(in.from, in.owner, in.version)
		switch out.err {
		case errLeaseLost:
			return s, !held
		case errNone:
			if !held {
				return s, false
			}
			return mstate{maxVer: max(s.maxVer, s.version)}, true
		}
		return s, false
	}
	return s, false
}

func describeOp(in histIn, out histOut) string {
	var b strings.Builder
	b.WriteString(in.kind.String())
	switch in.kind {
	case opClaim:
		fmt.Fprintf(&b, "(owner=%q fp=%s acquireUnknown=%v)", in.owner, short(in.fp), in.acquireUnknown)
	case opTransition:
		fmt.Fprintf(&b, "(%s->%s owner=%q v%d newOwner=%q lease=%v)", in.from, in.to, in.owner, in.version, in.newOwner, in.lease)
	case opRenew, opRelease:
		fmt.Fprintf(&b, "(%s owner=%q v%d)", in.from, in.owner, in.version)
	case opAcquire:
		fmt.Fprintf(&b, "(owner=%q)", in.owner)
	}
	b.WriteString(" -> ")
	switch {
	case out.err != errNone:
		b.WriteString(out.err.String())
	case in.kind == opTransition:
		fmt.Fprintf(&b, "v%d", out.v)
	case in.kind == opRenew:
		fmt.Fprintf(&b, "lease %d", out.lease)
	case in.kind == opRelease:
		b.WriteString("released")
	default:
		if in.kind == opClaim {
			fmt.Fprintf(&b, "claimed=%v ", out.claimed)
		}
		r := out.rec
		fmt.Fprintf(&b, "%s owner=%q v%d fp=%s takeovers=%d lease=%d expires=%d now=%d", r.st, r.owner, r.version, short(r.fp), r.takeovers, r.lease, r.expires, r.now)
	}
	if in.who != "" {
		fmt.Fprintf(&b, " [%s]", in.who)
	}
	return b.String()
}

// recordModel is the porcupine model of one identity's record.
func recordModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{mstate{}} },
		Step: func(state, input, output any) []any {
			next := modelStep(state.(mstate), input.(histIn), output.(histOut))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal:             func(a, b any) bool { return a.(mstate) == b.(mstate) },
		DescribeOperation: func(in, out any) string { return describeOp(in.(histIn), out.(histOut)) },
		DescribeState:     func(s any) string { return s.(mstate).String() },
	}
}

// recorder keeps the store history per identity, in one sequence of ticks,
// and what the invariants need to know about record lives.
type recorder struct {
	mu        sync.Mutex
	tick      int64
	ops       map[runtime.Identity][]porcupine.Operation
	ambiguous map[runtime.Identity]string
	// Record lives, by version (versions grow with time per identity, so
	// their order is the order the store applied the writes in, whatever
	// order the workers' goroutines recorded them in): the versions of
	// claims that created a record, and of transitions to SUCCESS or FAILED.
	fresh, finals map[runtime.Identity][]int64
	trail         map[runtime.Identity][]string
	// last is the last write that changed the identity's version or
	// deleted it (renewals aside).
	last     map[runtime.Identity]lastWrite
	storeOps int
}

// lastWrite is a write that changed a record's version or deleted it.
type lastWrite struct {
	desc  string
	call  int
	tick  int64
	order int64 // 2 × the version it produced, 2 × the version released + 1
}

func newRecorder() *recorder {
	return &recorder{
		ops: map[runtime.Identity][]porcupine.Operation{}, ambiguous: map[runtime.Identity]string{},
		fresh: map[runtime.Identity][]int64{}, finals: map[runtime.Identity][]int64{}, trail: map[runtime.Identity][]string{},
		last: map[runtime.Identity]lastWrite{},
	}
}

func (r *recorder) now() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tick++
	return r.tick
}

const trailMax = 60

// stepBudget is the most model steps spent on one identity's history.
const stepBudget = 2_000_000

// note adds a line to the identity's trail of events.
func (r *recorder) note(id runtime.Identity, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(id, format, args...)
}

func (r *recorder) noteLocked(id runtime.Identity, format string, args ...any) {
	r.tick++
	line := fmt.Sprintf("@%d ", r.tick) + fmt.Sprintf(format, args...)
	t := append(r.trail[id], line)
	if len(t) > trailMax {
		t = t[len(t)-trailMax:]
	}
	r.trail[id] = t
}

// record adds one operation, called after the store returned.
func (r *recorder) record(id runtime.Identity, call int64, in histIn, out histOut) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tick++
	r.storeOps++
	r.ops[id] = append(r.ops[id], porcupine.Operation{ClientId: 0, Input: in, Call: call, Output: out, Return: r.tick})
	r.noteLocked(id, "store %s", describeOp(in, out))
	if out.err != errNone {
		return
	}
	// The last write is the one with the highest version, not the last one
	// recorded: a worker may record its write after another worker's later
	// one. A release of version v comes after the write that produced v and
	// before any that produces a higher one (order 2v+1 against 2v).
	var order int64 = -1
	switch {
	case in.kind == opTransition:
		order = 2 * out.v
	case in.kind == opAcquire || (in.kind == opClaim && out.claimed):
		order = 2 * out.rec.version
	case in.kind == opRelease:
		order = 2*in.version + 1
	}
	if w, ok := r.last[id]; order >= 0 && (!ok || order >= w.order) {
		r.last[id] = lastWrite{desc: describeOp(in, out), call: in.call, tick: r.tick, order: order}
	}
	switch {
	case in.kind == opClaim && out.claimed && out.rec.st == runtime.StateProcessing && out.rec.takeovers == 0:
		r.fresh[id] = append(r.fresh[id], out.rec.version)
	case in.kind == opTransition && in.to.Final():
		r.finals[id] = append(r.finals[id], out.v)
	}
}

// markAmbiguous leaves the identity's history unchecked: a store call failed
// with an error that does not tell whether it was applied.
func (r *recorder) markAmbiguous(id runtime.Identity, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ambiguous[id]; !ok {
		r.ambiguous[id] = why
	}
}

// lifeOf returns the record life (epoch) of a version: a new life begins
// with a claim that created a record after the previous life finished
// (SUCCESS or FAILED, then replaced or swept once its TTL passed); a release
// does not begin a new life, since the released attempt did not act.
func (r *recorder) lifeOf(id runtime.Identity, version int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh, finals := slices.Sorted(slices.Values(r.fresh[id])), slices.Sorted(slices.Values(r.finals[id]))
	life, prev, f := 0, int64(-1), 0
	for _, c := range fresh {
		if c > version {
			break
		}
		for f < len(finals) && finals[f] <= prev {
			f++
		}
		if f < len(finals) && finals[f] < c {
			life++
		}
		prev = c
	}
	return life
}

func (r *recorder) lastWriteOf(id runtime.Identity) (lastWrite, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.last[id]
	return w, ok
}

func (r *recorder) trailOf(id runtime.Identity) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.trail[id]...)
}

// linearizability checks each identity's history; it returns one
// description per identity that is not linearizable, and counts.
func (r *recorder) linearizability(timeout time.Duration) (bad map[runtime.Identity]string, checked, skipped, undecided int) {
	r.mu.Lock()
	ids := make([]runtime.Identity, 0, len(r.ops))
	for id := range r.ops {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i].Operation+ids[i].Key < ids[j].Operation+ids[j].Key })
	bad = map[runtime.Identity]string{}
	for _, id := range ids {
		r.mu.Lock()
		ops := append([]porcupine.Operation(nil), r.ops[id]...)
		_, amb := r.ambiguous[id]
		r.mu.Unlock()
		if amb {
			skipped++
			continue
		}
		// A step budget bounds the search: inside a synctest bubble the
		// checker's timeout never fires (virtual time stands still while it
		// computes). Past the budget every step fails, the search unwinds at
		// once, and the identity counts as undecided.
		steps, over := 0, false
		m := recordModel()
		inner := m.Step
		m.Step = func(state, input, output any) []any {
			if steps++; steps > stepBudget {
				over = true
				return nil
			}
			return inner(state, input, output)
		}
		res, info := porcupine.CheckOperationsVerbose(m.ToModel(), ops, timeout)
		switch {
		case over || res == porcupine.Unknown:
			undecided++
		case res == porcupine.Ok:
			checked++
		default:
			checked++
			bad[id] = describeFailure(ops, info)
		}
	}
	return bad, checked, skipped, undecided
}

// describeFailure prints the longest linearizable prefix found and the
// operations it could not place.
func describeFailure(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	states := []mstate{{}}
	fmt.Fprintf(&b, "longest linearizable prefix (%d of %d operations), with the model state after each:\n", len(longest), len(ops))
	start := max(0, len(longest)-25)
	placed := map[int64]bool{}
	for i, op := range longest {
		placed[op.Call] = true
		var next []mstate
		for _, st := range states {
			next = append(next, modelStep(st, op.Input.(histIn), op.Output.(histOut))...)
		}
		if len(next) > 0 {
			states = next
		}
		if i >= start {
			fmt.Fprintf(&b, "    [%d,%d] %s   => %v\n", op.Call, op.Return, describeOp(op.Input.(histIn), op.Output.(histOut)), states)
		}
	}
	for _, op := range ops {
		if placed[op.Call] {
			continue
		}
		if why := explain(states, op.Input.(histIn), op.Output.(histOut)); why != "" {
			b.WriteString("  diagnosis: " + why + "\n")
		}
		break
	}
	b.WriteString("  operations that cannot come next (concurrent or after the prefix):\n")
	n := 0
	for _, op := range ops {
		if placed[op.Call] {
			continue
		}
		if n++; n > 12 {
			b.WriteString("    ...\n")
			break
		}
		fmt.Fprintf(&b, "    [%d,%d] %s\n", op.Call, op.Return, describeOp(op.Input.(histIn), op.Output.(histOut)))
	}
	return b.String()
}

// explain says, when it can, why an operation cannot follow the states.
func explain(states []mstate, in histIn, out histOut) string {
	v := out.rec.version
	if in.kind == opTransition {
		v = out.v
	}
	produces := out.err == errNone && (in.kind == opTransition || in.kind == opAcquire || (in.kind == opClaim && out.claimed))
	for _, st := range states {
		if produces && v <= st.maxVer {
			return fmt.Sprintf("%s produced version %d, but this identity already had version %d: versions must strictly increase and never repeat, across releases, sweeps and replacements, or a stale owner's compare-and-set can match a new record (ABA)",
				in.kind.String(), v, st.maxVer)
		}
	}
	return fmt.Sprintf("%s with this output is impossible from any state the record may be in", in.kind.String())
}
