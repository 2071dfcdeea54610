package model

import "fmt"

// PC is an actor's program counter.
type PC uint8

// The program counters. Workers follow runtime.Do, the reconciler
// Reconciler.RunOnce and converge, the operator runtime.Resolve.
const (
	wOff       PC = iota // not in this configuration
	wClaim               // about to claim (again)
	wSlowReply           // claimed; the claim's reply is on its way (slow)
	wWait                // waiting on a live lease: Get, then decide
	wQuery               // holds UNKNOWN or a taken-over PROCESSING: asks the query
	wQCAS                // writes the query's answer (to PROCESSING: CAS before the effect)
	wEffect              // holds PROCESSING: runs the effect
	wInFlight            // the effect's request is on its way (fenced network)
	wComplete            // records the outcome (retried with its token)
	wDone                // returned to its client
	wDead                // crashed

	rIdle  // reconciler: AcquirePending
	rHeld  // reconciler: holds an UNKNOWN record: query or policy
	rWrite // reconciler: writes the outcome

	oGet    // operator: reads the record
	oClaim  // operator: takes it (Claim with AcquireUnknown)
	oUndo   // operator: releases a record its claim created
	oHandBk // operator: hands back a record that was replaced
	oWrite  // operator: writes the resolution
	oDone   // operator: finished

	tMark   // DoTx: names its transaction on the claim (committed on its own)
	tRecord // DoTx: the effect returned; writes SUCCESS inside its transaction
	tCommit // DoTx: SUCCESS written; the caller commits or rolls back
)

var pcNames = [...]string{"off", "claim", "slow-reply", "wait", "query", "query-cas", "effect", "in-flight", "complete", "done", "dead",
	"idle", "held", "write", "get", "claim", "undo", "hand-back", "write", "done",
	"mark-tx", "record-in-tx", "commit-or-rollback"}

func (p PC) String() string { return pcNames[p] }

// Out is the outcome an actor is about to write.
type Out uint8

// The outcomes.
const (
	outNone Out = iota
	outSuccess
	outFailed
	outUnknown
	outProcessing // the query said "did not happen": CAS to PROCESSING, then the effect
	outRelease
)

func (o Out) state() St {
	return [...]St{Absent, Success, Failed, Unknown, Processing, Absent}[o]
}

// Told is what a worker's client was told.
type Told uint8

// The answers.
const (
	toldNothing Told = iota
	toldSuccess
	toldFailed
	toldUnknown    // ErrOutcomeUnknown
	toldInProgress // ErrInProgress
	toldRetry      // released: a retry runs again
	toldLeaseLost  // ErrLeaseLost
	toldError      // a store error
)

var toldNames = [...]string{"-", "success", "failed", "ErrOutcomeUnknown", "ErrInProgress", "released (retry)", "ErrLeaseLost", "store error"}

func (t Told) String() string { return toldNames[t] }

// Downstream results of an effect.
const (
	dNone uint8 = iota
	dSucceeded
	dDeclined
)

// Actor is one actor's local state.
type Actor struct {
	PC PC
	// St, Ver: the (state, version) held.
	St  St
	Ver uint8
	// Known is the ticks the actor knows its lease holds (the lease rule).
	Known uint8
	Out   Out
	// Tok is the token of the outcome write, kept across its retries.
	Tok   uint8
	Tried bool
	Life  uint8
	// Msg is the token of the actor's effect request in flight (fenced
	// network configurations).
	Msg      uint8
	MsgLife  uint8
	Told     Told
	Attempts uint8
	Created  uint8
	// Direct: the operator writes from a hold-off UNKNOWN without taking it.
	Direct bool
	// Saw is what the downstream said of the record's life when the
	// operator read the record: a person decides from what they looked up
	// then, and Resolve acts on the version they looked at.
	Saw uint8
	// Then is where a worker goes when its slow claim reply arrives.
	Then PC
	// Late: the worker started its effect after the time its lease was
	// known to hold (a compare-and-set to PROCESSING whose retries took
	// that long); its heartbeat's first round asks the store once, before
	// the next tick.
	Late bool
	// Tx is a DoTx worker's transaction: txOpen until it commits, rolls
	// back or its process dies (txEnded); txNone for runtime.Do workers.
	Tx uint8
	// TxVer is the version of the SUCCESS record a DoTx worker wrote in
	// its open transaction (committed with it).
	TxVer uint8
}

// A DoTx worker's transaction.
const (
	txNone uint8 = iota
	txOpen
	txEnded
)

// State is one state of the model.
type State struct {
	Rec     Rec
	Counter uint8
	Life    uint8
	// MaxSeen is the highest fencing token the downstream has seen.
	MaxSeen uint8
	A       [numActors]Actor
	// Per life: effects the downstream accepted, its result, whether a
	// fault opened the at-least-once window of a no-query operation, a
	// second effect outside it, and what clients were told.
	Applied [maxLives]uint8
	D       [maxLives]uint8
	Window  [maxLives]bool
	Dup     [maxLives]bool
	ToldS   [maxLives]bool
	ToldF   [maxLives]bool
	// Faults used.
	Crashes, Lost, QErr, Slow uint8
	// TxLiveLost: a DoTx call that knew its lease live was told
	// ErrLeaseLost at its SUCCESS write (a duplicate took its claim over).
	TxLiveLost bool
}

// Config bounds the model.
type Config struct {
	// Workers is how many calls with the same identity run (1 to 3).
	Workers int
	// Query: the operation has a "did it happen?" query.
	Query bool
	// NotHappenedFail: the no-query policy (and a query's "did not happen"
	// at the reconciler) records FAILED instead of releasing.
	NotHappenedFail bool
	// Network: effect requests travel separately and may arrive after the
	// worker stopped waiting (only fencing protects); otherwise an effect
	// honours its context and lands while its worker holds the lease.
	Network bool
	// Reconciler, Sweeper, Operator enable those actors.
	Reconciler, Sweeper, Operator bool
	// MaxAttempts is the reconciler's limit for a queried operation.
	MaxAttempts uint8
	// Fault bounds. SlowReplies are claim replies that arrive after the
	// lease they grant could have expired (ticks pass in between).
	Crashes, LostReplies, QueryErrors, SlowReplies uint8
	// Lives: 1, or 2 to let a final record expire, be swept or replaced.
	Lives uint8
	// SharedOwner: the workers are concurrent calls in one process, so
	// they write the same owner id (a runtime's owner is per process);
	// otherwise each worker is its own process.
	SharedOwner bool
	// ConfirmLateStart: a worker whose lease is no longer known to hold
	// when its effect is about to start (a compare-and-set to PROCESSING
	// retried that long) confirms it with a renewal before starting, as
	// the runtime does (confirmLateStart in runtime/do.go); off, it starts
	// the effect and renews at once, concurrently, as the runtime once did.
	ConfirmLateStart bool
	// NoOverlap also checks the strict form of the lease invariant: no two
	// workers run the effect at once, whether or not they know their lease
	// live.
	NoOverlap bool
	// Policy is the runtime's error policy for unclassified errors
	// (runtime.WithErrorPolicy). Under the default, RecordUnknown, an
	// unclassified error is UNKNOWN like a lost reply, which the model
	// already has; the other two add effects that fail with an
	// unclassified error, before or after the downstream applied them.
	Policy ErrorPolicy
	// SweepAlways: the sweeper also runs in states where the model
	// deletes nothing (a step that changes nothing), so that a replayed
	// walk asks the store to sweep beside live, pending and fresh final
	// records and checks it spares them. The exhaustive check leaves it
	// off: such steps add no state.
	SweepAlways bool
	// TxWorkers of the workers (the first ones) call pgstore.DoTx instead
	// of runtime.Do: a local effect written in the caller's transaction,
	// its SUCCESS written there too, then committed or rolled back by the
	// caller. Their operation has no query (Query must be false).
	TxWorkers int
	// Mutation breaks one guard.
	Mutation Mutation
}

// ErrorPolicy mirrors runtime.ErrorPolicy.
type ErrorPolicy uint8

// The error policies.
const (
	RecordUnknown ErrorPolicy = iota
	RecordFailed
	ReleaseRecord
)

func (p ErrorPolicy) String() string {
	return [...]string{"RecordUnknown", "RecordFailed", "ReleaseRecord"}[p]
}

// unclassified is the outcome an unclassified error is recorded as.
func (p ErrorPolicy) unclassified() Out {
	return [...]Out{outUnknown, outFailed, outRelease}[p]
}

func (c Config) String() string {
	q := "no query"
	if c.Query {
		q = "query"
	}
	pol := "release"
	if c.NotHappenedFail {
		pol = "fail"
	}
	net := "effects honour their context"
	if c.Network {
		net = "effects delayed in the network (fencing only)"
	}
	owners := "one process each"
	if c.SharedOwner {
		owners = "one process (same owner id)"
	}
	slow := ""
	if c.SlowReplies > 0 {
		slow = fmt.Sprintf(", slow claim replies<=%d", c.SlowReplies)
	}
	if c.TxWorkers > 0 {
		owners += fmt.Sprintf(", %d through DoTx", c.TxWorkers)
	}
	return fmt.Sprintf("%d workers (%s), %s, not-happened policy %s, %s, reconciler=%v sweeper=%v resolve=%v, max attempts %d, "+
		"crashes<=%d lost replies<=%d unanswered queries<=%d lives<=%d, error policy %s, confirm late start=%v, strict overlap=%v, mutation %s",
		c.Workers, owners, q, pol, net, c.Reconciler, c.Sweeper, c.Operator, c.MaxAttempts,
		c.Crashes, c.LostReplies, c.QueryErrors, c.Lives, c.Policy, c.ConfirmLateStart, c.NoOverlap, c.Mutation) + slow
}

// Step is one atomic step: an actor's (with the store operation it ran)
// or the environment's.
type Step struct {
	Actor int8 // -1: the environment
	What  string
	Fault bool
	Op    Op
	Res   OpResult
}

func (st Step) String() string {
	who := "env"
	if st.Actor >= 0 {
		who = ownerName(st.Actor)
	}
	s := fmt.Sprintf("%-4s %s", who, st.What)
	if st.Op.Kind != OpNone {
		s += fmt.Sprintf(" [%s%s -> %s]", st.Op.Kind, opArgs(st.Op), st.Res)
	}
	if st.Fault {
		s += " (fault)"
	}
	return s
}

func opArgs(op Op) string {
	switch op.Kind {
	case OpTransition:
		return fmt.Sprintf("(%s,%s,v%d -> %s owner=%s lease=%d token=t%d)", op.From, ownerName(op.Owner), op.Ver, op.To, ownerName(op.NewOwner), op.Lease, op.Token)
	case OpRenew, OpRelease:
		return fmt.Sprintf("(%s,%s,v%d)", op.From, ownerName(op.Owner), op.Ver)
	case OpClaim:
		return fmt.Sprintf("(%s acquireUnknown=%v)", ownerName(op.Owner), op.AcquireUnknown)
	}
	return ""
}

const env int8 = -1

// initial returns the initial state of c.
func (c Config) initial() State {
	s := State{Rec: Rec{Owner: NoOwner}}
	for i := range MaxWorkers {
		if i < c.Workers {
			s.A[i].PC = wClaim
		}
		if i < c.TxWorkers {
			s.A[i].Tx = txOpen // the caller began it before DoTx
		}
	}
	if c.Reconciler {
		s.A[Reconciler].PC = rIdle
	}
	if c.Operator {
		s.A[Operator].PC = oGet
	}
	return s
}

// stepper generates the successors of one state.
type stepper struct {
	c    *Config
	s    *State
	emit func(Step, *State)
}

// next calls emit with every step enabled in s and the state it leads to.
func (c *Config) next(s *State, emit func(Step, *State)) {
	g := stepper{c: c, s: s, emit: func(st Step, ns *State) {
		if !st.Res.Blocked { // it waits for a transaction's lock
			emit(st, ns)
		}
	}}
	for i := range c.Workers {
		g.worker(int8(i))
	}
	if c.Reconciler {
		g.reconciler()
	}
	if c.Operator {
		g.operator()
	}
	if c.Network {
		for i := range c.Workers {
			g.deliver(int8(i))
		}
	}
	g.environment()
}

// owner is the owner id actor id writes.
func (c *Config) owner(id int8) int8 {
	if c.SharedOwner && id < MaxWorkers {
		return 0
	}
	return id
}

// op runs a store operation on a copy of the state.
func (g *stepper) op(op Op) (State, OpResult) {
	ns := *g.s
	res := ns.apply(op, g.c.Mutation)
	return ns, res
}

func (g *stepper) crash(id int8, to PC) {
	a := g.s.A[id]
	if g.s.Crashes >= g.c.Crashes || a.PC == to {
		return
	}
	ns := *g.s
	ns.Crashes++
	ns.A[id].PC = to
	if a.Tx == txOpen {
		endTx(&ns, id) // the connection closes: PostgreSQL rolls it back
	}
	if id == Reconciler {
		ns.A[id] = Actor{PC: rIdle} // a crashed reconciler restarts
	}
	g.emit(Step{Actor: id, What: "crashes", Fault: true}, &ns)
}

// isTx reports whether worker id calls DoTx.
func (c *Config) isTx(id int8) bool { return id >= 0 && int(id) < c.TxWorkers }

// endTx ends worker id's open transaction without its SUCCESS write (it
// rolled back, or its process died): its lock on the row is released,
// and a claim naming it counts as lease-ended for everyone.
func endTx(ns *State, id int8) {
	ns.A[id].Tx = txEnded
	r := &ns.Rec
	if r.HeldBy == uint8(id)+1 {
		r.HeldBy = 0
	}
	if r.XactBy == uint8(id)+1 && r.St == Processing {
		r.Lease, r.XactBy = 0, 0
	}
}

// tell records what a worker's client is told and ends its call.
func tell(ns *State, id int8, t Told, life uint8) {
	a := &ns.A[id]
	if a.Tx == txOpen {
		endTx(ns, id) // DoTx returned: its caller ends the transaction
	}
	a.PC, a.Told = wDone, t
	switch t {
	case toldSuccess:
		ns.ToldS[life] = true
	case toldFailed:
		ns.ToldF[life] = true
	}
}

// canLose reports whether the bound allows one more lost reply (a write
// applied whose caller saw an error, or a call that timed out).
func (g *stepper) canLose() bool { return g.s.Lost < g.c.LostReplies }

func (g *stepper) worker(id int8) {
	c, s := g.c, g.s
	a := s.A[id]
	switch a.PC {
	case wOff, wDone, wDead:
		return
	case wClaim:
		op := Op{Kind: OpClaim, Owner: c.owner(id), AcquireUnknown: c.Query, Lease: lease}
		ns, res := g.op(op)
		if res.Claimed {
			if g.canLose() { // applied, reply lost: Do returns the store error
				ls := ns
				ls.Lost++
				tell(&ls, id, toldError, res.Rec.Life)
				g.emit(Step{Actor: id, What: "claims", Op: op, Res: res, Fault: true}, &ls)
			}
			w := &ns.A[id]
			w.St, w.Ver, w.Life, w.Known, w.Tok, w.Tried = res.Rec.St, res.Rec.Ver, res.Rec.Life, known, 0, false
			switch {
			case res.Rec.St == Unknown:
				w.PC = wQuery
			case res.Takeover:
				ns.Window[res.Rec.Life] = true
				w.PC = wEffect
				if c.Query {
					w.PC = wQuery
				}
			default:
				w.PC = wEffect
			}
			if c.isTx(id) && w.PC == wEffect {
				w.PC = tMark
			}
			if s.Slow < c.SlowReplies {
				ss := ns
				ss.Slow++
				ss.A[id].PC, ss.A[id].Then = wSlowReply, w.PC
				g.emit(Step{Actor: id, What: "claims (the reply is slow)", Op: op, Res: res, Fault: true}, &ss)
			}
			g.emit(Step{Actor: id, What: "claims", Op: op, Res: res}, &ns)
			return
		}
		g.decide(id, Step{Actor: id, What: "claims", Op: op, Res: res}, &ns, res.Rec)
	case wSlowReply:
		// The lease was granted from the moment the claim was sent: the
		// ticks that passed since count against it.
		ns := *s
		w := &ns.A[id]
		w.PC, w.Then, w.Late = a.Then, wOff, a.Then == wEffect && a.Known == 0
		g.emit(Step{Actor: id, What: "gets the claim's reply"}, &ns)
	case wWait:
		op := Op{Kind: OpGet}
		ns, res := g.op(op)
		if res.Err == ErrNotFound {
			ns.A[id].PC = wClaim
			g.emit(Step{Actor: id, What: "polls: released, claims again", Op: op, Res: res}, &ns)
			break
		}
		g.decide(id, Step{Actor: id, What: "polls", Op: op, Res: res}, &ns, res.Rec)
	case wQuery:
		g.query(id, func(ns *State, o Out) {
			w := &ns.A[id]
			w.PC, w.Out, w.Tok, w.Tried = wQCAS, o, 0, false
			if o == outProcessing && c.Mutation == MutNoCASBeforeEffect {
				w.PC, w.St = wEffect, Processing
			}
		})
		g.renew(id)
	case wQCAS:
		to := a.Out.state()
		op := Op{Kind: OpTransition, From: a.St, Owner: c.owner(id), Ver: a.Ver, To: to, NewOwner: NoOwner}
		switch to {
		case Processing:
			op.NewOwner, op.Lease = c.owner(id), lease
		case Success, Failed:
			op.TTL = s.finalTTL()
		case Unknown:
			op.KeepNote = true // cannot tell either: the record keeps its note
		}
		g.write(id, op, true, func(ns *State, res OpResult) {
			w := &ns.A[id]
			switch {
			case res.Err != OK:
				tell(ns, id, toldLeaseLost, a.Life)
			case to == Processing:
				w.PC, w.St, w.Ver, w.Tok, w.Tried = wEffect, Processing, res.Ver, 0, false
				if !a.Tried {
					w.Known = known
				}
				w.Late = w.Known == 0
			case to == Success:
				tell(ns, id, toldSuccess, a.Life)
			case to == Failed:
				tell(ns, id, toldFailed, a.Life)
			default:
				tell(ns, id, toldUnknown, a.Life)
			}
		})
		g.renew(id)
	case tMark:
		// MarkClaimTx: a compare-and-set on the claim, committed on its
		// own (the effect has not run: a lost claim is told so).
		ns := *s
		if !ns.held(Processing, c.owner(id), a.Ver, c.Mutation) || ns.Rec.HeldBy != 0 {
			tell(&ns, id, toldLeaseLost, a.Life)
			endTx(&ns, id) // the caller rolls back
			g.emit(Step{Actor: id, What: "names its transaction: lease lost, the effect did not run"}, &ns)
		} else {
			if c.Mutation != MutTxWindow {
				ns.Rec.XactBy = uint8(id) + 1
			}
			ns.A[id].PC = wEffect
			g.emit(Step{Actor: id, What: "names its transaction on the claim"}, &ns)
		}
		g.renew(id)
	case tRecord:
		// The SUCCESS compare-and-set inside the transaction (the
		// renewals have stopped): it takes the row's lock until the
		// transaction ends.
		ns := *s
		if ns.held(Processing, c.owner(id), a.Ver, c.Mutation) && ns.Rec.HeldBy == 0 {
			w := &ns.A[id]
			w.TxVer, w.Tok, w.PC = ns.newVersion(), ns.newVersion(), tCommit
			ns.Rec.HeldBy = uint8(id) + 1
			g.emit(Step{Actor: id, What: "writes SUCCESS in its transaction"}, &ns)
		} else {
			if a.Known > 0 {
				ns.TxLiveLost = true
			}
			tell(&ns, id, toldLeaseLost, a.Life)
			endTx(&ns, id) // its savepoint rolled back; the caller rolls back
			g.emit(Step{Actor: id, What: "writes SUCCESS in its transaction: lease lost, its writes are rolled back"}, &ns)
		}
	case tCommit:
		{ // the caller commits: the effect's writes and SUCCESS at once
			ns := *s
			r := &ns.Rec
			*r = Rec{St: Success, Owner: NoOwner, Ver: a.TxVer, Token: a.Tok, TTL: ns.finalTTL(), Attempts: r.Attempts,
				Takeovers: r.Takeovers, Created: r.Created, Life: r.Life}
			ns.A[id].Tx = txEnded
			if ns.Applied[a.Life] > 0 && !ns.Window[a.Life] { // no fencing: the SUCCESS compare-and-set is the fence
				ns.Dup[a.Life] = true
			}
			ns.Applied[a.Life] = min(ns.Applied[a.Life]+1, 3)
			if ns.D[a.Life] == dNone {
				ns.D[a.Life] = dSucceeded
			}
			tell(&ns, id, toldSuccess, a.Life)
			g.emit(Step{Actor: id, What: "commits"}, &ns)
		}
		{ // the caller rolls back: nothing of the effect remains
			ns := *s
			endTx(&ns, id)
			tell(&ns, id, toldRetry, a.Life)
			g.emit(Step{Actor: id, What: "rolls back (the claim is free at once)"}, &ns)
		}
	case wEffect:
		if c.isTx(id) {
			g.localEffect(id)
		} else {
			g.effect(id)
		}
		g.renew(id)
	case wInFlight:
		if s.Lost < c.LostReplies { // the call times out while the request is on its way
			ns := *s
			ns.Lost++
			w := &ns.A[id]
			w.PC, w.Out = wComplete, outUnknown
			g.emit(Step{Actor: id, What: "effect times out (request still in flight)", Fault: true}, &ns)
		}
		g.renew(id)
	case wComplete:
		op := Op{Kind: OpTransition, From: a.St, Owner: c.owner(id), Ver: a.Ver, To: a.Out.state(), NewOwner: NoOwner}
		if a.Out == outRelease {
			op = Op{Kind: OpRelease, From: a.St, Owner: c.owner(id), Ver: a.Ver}
		} else if op.To.Final() {
			op.TTL = s.finalTTL()
		}
		g.write(id, op, true, func(ns *State, res OpResult) {
			switch {
			case res.Err == ErrLeaseLost && a.Out == outRelease && a.Tried:
				tell(ns, id, toldRetry, a.Life) // a release retried after its reply was lost
			case res.Err != OK:
				tell(ns, id, toldLeaseLost, a.Life)
			default:
				tell(ns, id, [...]Told{toldNothing, toldSuccess, toldFailed, toldUnknown, toldNothing, toldRetry}[a.Out], a.Life)
			}
		})
		g.renew(id)
	}
	g.crash(id, wDead)
}

// decide is what Do does with a record it did not claim (after a Claim or
// a Get): replay a final outcome, report an UNKNOWN it cannot converge,
// wait on a live lease or a held row (or give up waiting), or claim again.
func (g *stepper) decide(id int8, st Step, ns *State, rec Rec) {
	switch {
	case st.Res.Busy:
		gs := *ns
		tell(&gs, id, toldInProgress, rec.Life)
		g.emit(Step{Actor: id, What: st.What + ": row held by a transaction, gives up waiting (MaxWait)", Op: st.Op, Res: st.Res}, &gs)
		ns.A[id].PC = wWait
		st.What += ": row held by a transaction, waits"
	case rec.St.Final():
		t := toldSuccess
		if rec.St == Failed {
			t = toldFailed
		}
		tell(ns, id, t, rec.Life)
		st.What += ": replays"
	case rec.St == Unknown && (!g.c.Query || rec.Owner == NoOwner):
		tell(ns, id, toldUnknown, rec.Life)
		st.What += ": outcome unknown"
	case rec.Lease > 0:
		gs := *ns
		tell(&gs, id, toldInProgress, rec.Life)
		g.emit(Step{Actor: id, What: st.What + ": in progress, gives up waiting (MaxWait)", Op: st.Op, Res: st.Res}, &gs)
		ns.A[id].PC = wWait
		st.What += ": in progress, waits"
	default:
		ns.A[id].PC = wClaim
		st.What += ": lease free, claims again"
	}
	g.emit(st, ns)
}

// query runs the query with the actor's version as fencing token, or its
// "cannot tell" fault, and hands the outcome to then.
func (g *stepper) query(id int8, then func(*State, Out)) {
	c, s := g.c, g.s
	a := s.A[id]
	if c.QueryErrors > s.QErr {
		ns := *s
		ns.QErr++
		then(&ns, outUnknown)
		g.emit(Step{Actor: id, What: "queries: cannot tell", Fault: true}, &ns)
	}
	ns := *s
	var o Out
	what := "queries"
	if a.Ver < ns.MaxSeen && c.Mutation != MutNoFencing {
		o, what = outUnknown, "queries: stale token rejected"
	} else {
		ns.MaxSeen = max(ns.MaxSeen, a.Ver)
		switch ns.D[a.Life] {
		case dSucceeded:
			o, what = outSuccess, "queries: it happened"
		case dDeclined:
			o, what = outFailed, "queries: it was declined"
		default:
			o, what = outProcessing, "queries: it did not happen"
		}
	}
	then(&ns, o)
	g.emit(Step{Actor: id, What: what}, &ns)
}

// accept applies an effect request with token tok of life l at the
// downstream, and returns false when the token is stale.
func (c *Config) accept(ns *State, tok, l uint8) bool {
	if tok < ns.MaxSeen && c.Mutation != MutNoFencing {
		return false
	}
	ns.MaxSeen = max(ns.MaxSeen, tok)
	if ns.Applied[l] > 0 && (c.Query || !ns.Window[l]) {
		ns.Dup[l] = true
	}
	ns.Applied[l] = min(ns.Applied[l]+1, 3)
	return true
}

// effect: the worker holding PROCESSING runs the effect, or its effect
// fails retryably before reaching the downstream.
func (g *stepper) effect(id int8) {
	c, s := g.c, g.s
	a := s.A[id]
	{
		ns := *s
		w := &ns.A[id]
		w.PC, w.Out = wComplete, outRelease
		g.emit(Step{Actor: id, What: "effect fails retryably before the downstream"}, &ns)
	}
	if c.Policy != RecordUnknown {
		ns := *s
		w := &ns.A[id]
		w.PC, w.Out = wComplete, c.Policy.unclassified()
		g.emit(Step{Actor: id, What: "effect fails with an unclassified error before the downstream"}, &ns)
	}
	if a.Known == 0 && (!a.Late || c.ConfirmLateStart) {
		return // stopped by the lease rule (see environment), or confirming a late start first
	}
	if c.Network {
		ns := *s
		w := &ns.A[id]
		w.PC, w.Msg, w.MsgLife = wInFlight, a.Ver, a.Life
		g.emit(Step{Actor: id, What: fmt.Sprintf("sends the effect (token v%d)", a.Ver)}, &ns)
		return
	}
	g.land(id, a.Ver, a.Life, true)
}

// localEffect: a DoTx worker runs its effect inside its transaction (a
// savepoint): it succeeds (nothing is visible until the commit), fails
// permanently (its writes are rolled back and FAILED is recorded on its
// own), or fails otherwise (rolled back, the claim released). The lease
// rule stops it as it stops Do's (see environment).
func (g *stepper) localEffect(id int8) {
	s := g.s
	a := s.A[id]
	for _, o := range []Out{outFailed, outRelease} {
		ns := *s
		ns.A[id].PC, ns.A[id].Out = wComplete, o
		what := "effect fails permanently: rolled back"
		if o == outRelease {
			what = "effect fails: rolled back"
		}
		g.emit(Step{Actor: id, What: what}, &ns)
	}
	if a.Known == 0 && !a.Late {
		return // stopped by the lease rule (see environment)
	}
	ns := *s
	ns.A[id].PC = tRecord
	if g.c.Mutation == MutTxWindow && ns.held(Processing, g.c.owner(id), a.Ver, NoMutation) {
		ns.Rec.Lease = 0 // the claim's lease ended before the SUCCESS write
	}
	g.emit(Step{Actor: id, What: "effect succeeds in its transaction"}, &ns)
}

// land delivers an effect request at the downstream: rejected, or applied
// (succeeded or declined) with its reply delivered or lost. reply tells
// whether the sender still waits for the reply.
func (g *stepper) land(id int8, tok, l uint8, reply bool) {
	c, s := g.c, g.s
	ns := *s
	ns.A[id].Msg = 0
	if !c.accept(&ns, tok, l) {
		for _, o := range []Out{outUnknown, outRelease} {
			rs := ns
			if reply {
				rs.A[id].PC, rs.A[id].Out = wComplete, o
			}
			g.emit(Step{Actor: id, What: fmt.Sprintf("effect (token v%d) rejected as stale", tok)}, &rs)
			if !reply {
				break
			}
		}
		return
	}
	for _, d := range []uint8{dSucceeded, dDeclined} {
		ds := ns
		if ds.D[l] == dNone {
			ds.D[l] = d
		}
		what := fmt.Sprintf("effect (token v%d) applied: succeeded", tok)
		o := outSuccess
		if d == dDeclined {
			what, o = fmt.Sprintf("effect (token v%d) applied: declined", tok), outFailed
		}
		if !reply {
			g.emit(Step{Actor: id, What: what + ", nobody waits for the reply"}, &ds)
			continue
		}
		rs := ds
		rs.A[id].PC, rs.A[id].Out = wComplete, o
		g.emit(Step{Actor: id, What: what}, &rs)
		if c.Policy != RecordUnknown {
			es := ds
			es.A[id].PC, es.A[id].Out = wComplete, c.Policy.unclassified()
			g.emit(Step{Actor: id, What: what + ", but the effect returns an unclassified error"}, &es)
		}
		if g.canLose() {
			ls := ds
			ls.Lost++
			ls.A[id].PC, ls.A[id].Out = wComplete, outUnknown
			g.emit(Step{Actor: id, What: what + ", reply lost (timeout)", Fault: true}, &ls)
		}
	}
}

// deliver: the network delivers a worker's effect request in flight.
func (g *stepper) deliver(id int8) {
	a := g.s.A[id]
	if a.Msg == 0 {
		return
	}
	g.land(id, a.Msg, a.MsgLife, a.PC == wInFlight)
}

// renew: the heartbeat renews the lease held (the write may be applied and
// its reply lost); a renewal that finds the lease gone stops the effect.
func (g *stepper) renew(id int8) {
	s := g.s
	a := s.A[id]
	if a.Known >= known && s.Rec.Lease >= lease {
		return // nothing to renew yet: a renewal would change nothing
	}
	op := Op{Kind: OpRenew, From: a.St, Owner: g.c.owner(id), Ver: a.Ver, Lease: lease}
	ns, res := g.op(op)
	if res.Err != OK {
		w := &ns.A[id]
		switch a.PC {
		case wQuery:
			tell(&ns, id, toldLeaseLost, a.Life)
		case wEffect, wInFlight:
			w.PC, w.Out = wComplete, outUnknown
			if g.c.isTx(id) {
				w.Out = outRelease // its writes are rolled back
			}
		default:
			return // completing: the completion reports it
		}
		g.emit(Step{Actor: id, What: "renews: lease lost, stops", Op: op, Res: res}, &ns)
		return
	}
	if g.canLose() {
		ls := ns
		ls.Lost++
		g.emit(Step{Actor: id, What: "renews (reply lost)", Op: op, Res: res, Fault: true}, &ls)
	}
	ns.A[id].Known, ns.A[id].Late = known, false
	g.emit(Step{Actor: id, What: "renews", Op: op, Res: res}, &ns)
}

// write runs an outcome write with its token (drawn on the first try and
// kept across retries), and its lost-reply variant (applied; the actor
// retries).
func (g *stepper) write(id int8, op Op, retry bool, then func(*State, OpResult)) {
	s := g.s
	ns := *s
	w := &ns.A[id]
	if op.Kind == OpTransition {
		if w.Tok == 0 {
			w.Tok = ns.newVersion()
		}
		op.Token = w.Tok
	}
	res := ns.apply(op, g.c.Mutation)
	if res.Err == OK && g.canLose() {
		ls := ns
		ls.Lost++
		what := "writes (reply lost, will retry)"
		if retry {
			ls.A[id].Tried = true
			if op.To == Processing && !s.A[id].Tried {
				ls.A[id].Known = known // granted from the first send
			}
		} else {
			then(&ls, res)
			what = "writes (reply lost)"
		}
		g.emit(Step{Actor: id, What: what, Op: op, Res: res, Fault: true}, &ls)
	}
	then(&ns, res)
	g.emit(Step{Actor: id, What: "writes", Op: op, Res: res}, &ns)
}

func (g *stepper) reconciler() {
	c, s := g.c, g.s
	a := s.A[Reconciler]
	switch a.PC {
	case rIdle:
		op := Op{Kind: OpAcquire, Owner: Reconciler, Lease: lease}
		if c.Query {
			op.MaxAttempts = c.MaxAttempts
		}
		ns, res := g.op(op)
		if res.Rec.St == Absent {
			return // nothing due: the pass changes nothing
		}
		if g.canLose() {
			ls := ns
			ls.Lost++
			g.emit(Step{Actor: Reconciler, What: "acquires (reply lost)", Op: op, Res: res, Fault: true}, &ls)
		}
		ns.A[Reconciler] = Actor{PC: rHeld, St: Unknown, Ver: res.Rec.Ver, Life: res.Rec.Life, Attempts: res.Rec.Attempts}
		g.emit(Step{Actor: Reconciler, What: "acquires", Op: op, Res: res}, &ns)
	case rHeld:
		if !c.Query {
			ns := *s
			ns.A[Reconciler].PC, ns.A[Reconciler].Out = rWrite, outRelease
			what := "no query: policy releases"
			if c.NotHappenedFail {
				ns.A[Reconciler].Out, what = outFailed, "no query: policy records FAILED"
			}
			g.emit(Step{Actor: Reconciler, What: what}, &ns)
			break
		}
		g.query(Reconciler, func(ns *State, o Out) {
			if o == outProcessing {
				o = outRelease
				if c.NotHappenedFail {
					o = outFailed
				}
			}
			ns.A[Reconciler].PC, ns.A[Reconciler].Out = rWrite, o
		})
	case rWrite:
		op := Op{Kind: OpTransition, From: Unknown, Owner: Reconciler, Ver: a.Ver, To: a.Out.state(), NewOwner: NoOwner}
		switch a.Out {
		case outRelease:
			op = Op{Kind: OpRelease, From: Unknown, Owner: Reconciler, Ver: a.Ver}
		case outUnknown:
			op.Lease, op.GaveUp = holdOff, a.Attempts >= c.MaxAttempts
		default:
			op.TTL = s.finalTTL()
		}
		g.write(Reconciler, op, false, func(ns *State, res OpResult) {
			if res.Err == OK && a.Out == outRelease {
				ns.Window[a.Life] = true // released without knowing (policy) or knowing it did not happen
			}
			ns.A[Reconciler] = Actor{PC: rIdle}
		})
	}
	g.crash(Reconciler, rIdle)
}

func (g *stepper) operator() {
	s := g.s
	a := s.A[Operator]
	switch a.PC {
	case oGet:
		op := Op{Kind: OpGet}
		ns, res := g.op(op)
		r := res.Rec
		w := &ns.A[Operator]
		switch {
		case res.Err != OK || r.St.Final() || (r.Lease > 0 && (r.Owner != NoOwner || r.St == Processing)):
			w.PC = oDone
			g.emit(Step{Actor: Operator, What: "resolve: reads the record: refused", Op: op, Res: res}, &ns)
		case r.St == Unknown && r.Owner == NoOwner && r.Lease > 0:
			w.PC, w.St, w.Ver, w.Life, w.Direct, w.Saw = oWrite, Unknown, r.Ver, r.Life, true, s.D[r.Life]
			g.emit(Step{Actor: Operator, What: "resolve: reads the record (held off: writes from it)", Op: op, Res: res}, &ns)
		default:
			w.PC, w.Created, w.Ver, w.Saw = oClaim, r.Created, r.Ver, s.D[r.Life]
			g.emit(Step{Actor: Operator, What: "resolve: reads the record", Op: op, Res: res}, &ns)
		}
	case oClaim:
		// The take names the version read (ClaimParams.IfVersion).
		op := Op{Kind: OpClaim, Owner: Operator, AcquireUnknown: true, Lease: lease, Ver: a.Ver}
		ns, res := g.op(op)
		w := &ns.A[Operator]
		r := res.Rec
		switch {
		case !res.Claimed:
			w.PC = oDone
		case r.St == Processing && r.Takeovers == 0 && !res.Takeover:
			w.PC, w.St, w.Ver = oUndo, r.St, r.Ver
		case r.Created != a.Created:
			w.PC, w.St, w.Ver = oHandBk, r.St, r.Ver
		default:
			if res.Takeover {
				ns.Window[r.Life] = true
			}
			w.PC, w.St, w.Ver, w.Life = oWrite, r.St, r.Ver, r.Life
		}
		g.emit(Step{Actor: Operator, What: "resolve: takes the record", Op: op, Res: res}, &ns)
	case oUndo:
		op := Op{Kind: OpRelease, From: a.St, Owner: Operator, Ver: a.Ver}
		ns, res := g.op(op)
		ns.A[Operator].PC = oDone
		g.emit(Step{Actor: Operator, What: "resolve: releases the record its claim created", Op: op, Res: res}, &ns)
	case oHandBk:
		op := Op{Kind: OpTransition, From: a.St, Owner: Operator, Ver: a.Ver, To: a.St, NewOwner: NoOwner}
		if a.St == Processing {
			op.Lease = holdOff
		}
		g.write(Operator, op, true, func(ns *State, _ OpResult) { ns.A[Operator].PC = oDone })
	case oWrite:
		// The operator decides from what happened downstream (a careful
		// person looks it up): SUCCESS if it happened, FAILED if it was
		// declined, FAILED or released if it did not happen.
		outs := []Out{outFailed, outRelease}
		switch a.Saw {
		case dSucceeded:
			outs = []Out{outSuccess}
		case dDeclined:
			outs = []Out{outFailed}
		}
		owner := Operator
		if a.Direct {
			owner = NoOwner
		}
		for _, o := range outs {
			op := Op{Kind: OpTransition, From: a.St, Owner: owner, Ver: a.Ver, To: o.state(), NewOwner: NoOwner, TTL: s.finalTTL()}
			if o == outRelease {
				op = Op{Kind: OpRelease, From: a.St, Owner: owner, Ver: a.Ver}
			}
			ns := *s
			w := &ns.A[Operator]
			if op.Kind == OpTransition {
				w.Tok = ns.newVersion()
				op.Token = w.Tok
			}
			res := ns.apply(op, g.c.Mutation)
			w.PC = oDone
			g.emit(Step{Actor: Operator, What: "resolve: writes " + o.state().String(), Op: op, Res: res}, &ns)
		}
	}
	g.crash(Operator, oDone)
}

// environment: the clock ticks, and the sweeper runs.
func (g *stepper) environment() {
	c, s := g.c, g.s
	ns := *s
	changed := false
	dec := func(v *uint8) {
		if *v > 0 {
			*v--
			changed = true
		}
	}
	dec(&ns.Rec.Lease)
	if ns.Rec.St.Final() && ns.Rec.TTL > 0 {
		ns.Rec.TTL--
		changed = true
	}
	for i := range MaxWorkers {
		a := &ns.A[i]
		running := a.PC == wEffect || a.PC == wInFlight
		if running && c.Mutation == MutNoLeaseRule {
			continue // believes its lease until told otherwise
		}
		dec(&a.Known)
		// The lease rule: a worker that has not confirmed its lease stops
		// its effect (or its query) before the lease can expire: the
		// heartbeat's timer fires at that moment, a tick (the margin)
		// before the store's lease ends. A late start's quick renewal is
		// bounded the same way.
		if a.Known == 0 {
			switch {
			case running && c.isTx(int8(i)):
				a.PC, a.Out, a.Late = wComplete, outRelease, false // its writes are rolled back
				changed = true
			case running:
				a.PC, a.Out, a.Late = wComplete, outUnknown, false
				changed = true
			case a.PC == wQuery:
				tell(&ns, int8(i), toldLeaseLost, a.Life)
				changed = true
			}
		}
	}
	if changed {
		g.emit(Step{Actor: env, What: "tick"}, &ns)
	}
	if c.Sweeper {
		op := Op{Kind: OpSweep}
		ns, res := g.op(op)
		if res.N > 0 || c.SweepAlways {
			g.emit(Step{Actor: env, What: "sweeper sweeps", Op: op, Res: res}, &ns)
		}
	}
}
