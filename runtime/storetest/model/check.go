package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrTooManyStates is returned when the exploration exceeds its state limit.
var ErrTooManyStates = errors.New("model: state limit reached")

// Stats describe an exhaustive exploration.
type Stats struct {
	// States is the number of distinct reachable states (after symmetry
	// reduction), Edges the steps explored between them.
	States, Edges int
	// Depth is the length of the longest shortest path from the initial
	// state: every reachable state is reached within it.
	Depth int
	// Converge is the bound k of the liveness check: from every reachable
	// state, a fault-free continuation of at most k steps converges the
	// record or reports it.
	Converge int
	Elapsed  time.Duration
}

// Violation is an invariant broken, with the trace that breaks it.
type Violation struct {
	Invariant string
	Trace     []TraceStep
}

// TraceStep is one step of a trace and the state after it.
type TraceStep struct {
	Step  Step
	State State
}

func (v *Violation) Error() string { return "model: invariant violated: " + v.Invariant }

// Format prints the trace, one step a line with the record after it.
func (v *Violation) Format(c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "invariant violated: %s\nconfiguration: %s\n", v.Invariant, c)
	var prev State
	for i, t := range v.Trace {
		told := ""
		if a := t.Step.Actor; a >= 0 && a < MaxWorkers {
			w := &t.State.A[a]
			switch {
			case w.Told != prev.A[a].Told:
				told = "; its client is told " + w.Told.String()
			case w.PC == wEffect && w.Known == 0:
				told = "; it runs the effect with its lease unconfirmed (a late start)"
			case w.PC == wEffect || w.PC == wInFlight || w.PC == wQuery:
				told = fmt.Sprintf("; it knows its lease for %d more tick(s)", w.Known)
			}
		}
		if t.Step.Actor == env {
			for a := range MaxWorkers {
				was, now := prev.A[a].PC, t.State.A[a].PC
				if (was == wEffect || was == wInFlight || was == wQuery) && now != was {
					told += fmt.Sprintf("; the lease rule stops %s (its lease unconfirmed)", ownerName(int8(a)))
				}
			}
		}
		fmt.Fprintf(&b, "%3d. %s%s\n       record: %s%s\n", i+1, t.Step, told, t.State.Rec, t.State.downstream())
		prev = t.State
	}
	return b.String()
}

func (s *State) downstream() string {
	var parts []string
	for l := range maxLives {
		if s.Applied[l] > 0 || s.D[l] != dNone {
			parts = append(parts, fmt.Sprintf("life %d: %d effect(s) %s", l, s.Applied[l], [...]string{"", "succeeded", "declined"}[s.D[l]]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; downstream " + strings.Join(parts, ", ") + fmt.Sprintf(", fence v%d", s.MaxSeen)
}

// Result is the outcome of [Check].
type Result struct {
	Stats
	// Violation is the first invariant broken (nil when none is).
	Violation *Violation
}

// Check explores every state of c reachable within its bounds, breadth
// first, checking the invariants in every state and on every step, then
// the bounded liveness property. It stops at the first violation, or with
// [ErrTooManyStates] past maxStates.
func Check(c Config, maxStates int) (Result, error) {
	if c.TxWorkers < 0 || c.TxWorkers > c.Workers || (c.TxWorkers > 0 && (c.Query || c.Network)) {
		return Result{}, fmt.Errorf("model: TxWorkers must be 0 to Workers (%d), with no query and no network configuration, got %d", c.Workers, c.TxWorkers)
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return Result{}, fmt.Errorf("model: workers must be 1 to %d, got %d", MaxWorkers, c.Workers)
	}
	if c.Lives < 1 || c.Lives > maxLives {
		return Result{}, fmt.Errorf("model: lives must be 1 to %d, got %d", maxLives, c.Lives)
	}
	start := time.Now()
	x := explorer{c: &c, index: make(map[State]int32)}
	init := c.initial()
	if c.Lives == 1 {
		init.Life = maxLives - 1 // final records never expire
		init.Rec.Life = init.Life
	}
	x.add(canonical(init, &c), -1, 0)
	var res Result
	for i := 0; i < len(x.states) && res.Violation == nil; i++ {
		s := x.states[i]
		if v := checkState(&c, &s); v != "" {
			res.Violation = x.violation(init, int32(i), v)
			break
		}
		c.next(&s, func(st Step, ns *State) {
			if res.Violation != nil {
				return
			}
			x.edges++
			if v := checkStep(&s, ns); v != "" {
				res.Violation = x.violation(init, int32(i), v)
				res.Violation.Trace = append(res.Violation.Trace, TraceStep{Step: st, State: *ns})
				return
			}
			j := x.add(canonical(*ns, &c), int32(i), x.depth[i]+1)
			if !st.Fault {
				x.free = append(x.free, [2]int32{int32(i), j})
			}
		})
		if len(x.states) > maxStates {
			return res, fmt.Errorf("%w: more than %d states (%s)", ErrTooManyStates, maxStates, c)
		}
	}
	res.States, res.Edges = len(x.states), x.edges
	for _, d := range x.depth {
		res.Depth = max(res.Depth, int(d))
	}
	if res.Violation == nil {
		res.Converge, res.Violation = x.liveness(init)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

type explorer struct {
	c      *Config
	states []State
	index  map[State]int32
	parent []int32
	depth  []int32
	edges  int
	// free are the fault-free steps (from, to), for the liveness check.
	free [][2]int32
}

func (x *explorer) add(s State, parent, depth int32) int32 {
	if i, ok := x.index[s]; ok {
		return i
	}
	i := int32(len(x.states))
	x.index[s] = i
	x.states = append(x.states, s)
	x.parent = append(x.parent, parent)
	x.depth = append(x.depth, depth)
	return i
}

// violation builds the readable trace to state i: it replays the path from
// the initial state without canonicalising, so that versions and worker
// names read as they happened.
func (x *explorer) violation(init State, i int32, inv string) *Violation {
	var path []int32
	for j := i; j >= 0; j = x.parent[j] {
		path = append(path, j)
	}
	slices.Reverse(path)
	v := &Violation{Invariant: inv}
	cur := init
	for _, j := range path[1:] {
		want := x.states[j]
		found := false
		x.c.next(&cur, func(st Step, ns *State) {
			if !found && canonical(*ns, x.c) == want {
				found = true
				v.Trace = append(v.Trace, TraceStep{Step: st, State: *ns})
			}
		})
		if !found {
			panic(fmt.Sprintf("model: a trace step cannot be replayed:\nfrom %+v\ncanon %+v\nwant %+v", cur, canonical(cur, x.c), want))
		}
		cur = v.Trace[len(v.Trace)-1].State
	}
	return v
}

// liveness: from every state, a fault-free continuation reaches a settled
// record (absent, SUCCESS, FAILED, or UNKNOWN reported: out of
// reconciliation attempts). It returns the longest such shortest
// continuation, or the first state that has none.
func (x *explorer) liveness(init State) (int, *Violation) {
	n := len(x.states)
	// Reverse adjacency of the fault-free steps, in compressed form.
	start := make([]int32, n+1)
	for _, e := range x.free {
		start[e[1]+1]++
	}
	for i := range n {
		start[i+1] += start[i]
	}
	from := make([]int32, len(x.free))
	fill := slices.Clone(start[:n])
	for _, e := range x.free {
		from[fill[e[1]]] = e[0]
		fill[e[1]]++
	}
	dist := make([]int32, n)
	var queue []int32
	for i := range n {
		dist[i] = -1
		if x.settled(&x.states[i]) {
			dist[i] = 0
			queue = append(queue, int32(i))
		}
	}
	k := 0
	for q := 0; q < len(queue); q++ {
		j := queue[q]
		for _, i := range from[start[j]:start[j+1]] {
			if dist[i] < 0 {
				dist[i] = dist[j] + 1
				k = max(k, int(dist[i]))
				queue = append(queue, i)
			}
		}
	}
	for i := range n {
		if dist[i] < 0 {
			return k, x.violation(init, int32(i), "liveness: no fault-free continuation converges or reports the record")
		}
	}
	return k, nil
}

func (x *explorer) settled(s *State) bool {
	r := &s.Rec
	switch {
	case r.St == Absent, r.St.Final():
		return true
	case r.St == Unknown && r.Lease == 0 && x.c.Query && r.Attempts >= x.c.MaxAttempts:
		return true // out of attempts: listed for a person (idemctl list -gave-up)
	}
	return false
}

// checkState returns the invariant s breaks, or "".
func checkState(c *Config, s *State) string {
	for l := range maxLives {
		switch {
		case s.Dup[l] && c.Query:
			return fmt.Sprintf("exactly once: a second effect applied downstream (life %d) for an operation with a query", l)
		case s.Dup[l]:
			return fmt.Sprintf("at-least-once window: a second effect (life %d) without a fault that opens the window", l)
		case s.ToldS[l] && s.ToldF[l]:
			return fmt.Sprintf("answers: clients told SUCCESS and FAILED (life %d)", l)
		case s.Rec.Life == uint8(l) && s.ToldS[l] && s.Rec.St == Failed:
			return "answers: a client told SUCCESS for a FAILED record"
		case s.Rec.Life == uint8(l) && s.ToldF[l] && s.Rec.St == Success:
			return "answers: a client told FAILED for a SUCCESS record"
		case c.Query && s.ToldS[l] && s.D[l] != dSucceeded:
			return "answers: a client told SUCCESS for an effect that did not succeed"
		case c.Query && s.ToldF[l] && s.D[l] == dSucceeded:
			return "answers: a client told FAILED for an effect that happened"
		}
	}
	if s.TxLiveLost {
		return "DoTx: a call that knew its lease live was told ErrLeaseLost at its SUCCESS write (a duplicate took its claim over)"
	}
	running, believing := 0, 0
	for i := range MaxWorkers {
		a := &s.A[i]
		// A worker in wEffect has started its effect unless it is a late
		// start waiting for its renewal (with ConfirmLateStart).
		if a.PC == wInFlight || (a.PC == wEffect && (a.Known > 0 || (a.Late && !c.ConfirmLateStart))) {
			running++
			if a.Known > 0 {
				believing++
			}
		}
	}
	switch {
	case believing > 1:
		return "lease: two workers run the effect, each knowing its lease live"
	case running > 1 && c.NoOverlap:
		return "overlap: two workers run the effect at once (one started it with its lease unconfirmed)"
	}
	return ""
}

// checkStep returns the invariant the step from s to ns breaks, or "".
func checkStep(s, ns *State) string {
	r, nr := &s.Rec, &ns.Rec
	switch {
	case r.St.Final() && nr.St != Absent && nr.Created == r.Created && (nr.St != r.St || nr.Ver != r.Ver):
		return fmt.Sprintf("final: a %s record was changed to %s", r.St, nr.St)
	case r.HeldBy != 0 && nr.HeldBy == 0 && nr.St == Success:
		// A DoTx commit: the version its SUCCESS write drew, under the
		// row's lock, becomes visible now.
		if nr.Ver <= r.Ver {
			return fmt.Sprintf("versions: a commit made v%d visible over v%d", nr.Ver, r.Ver)
		}
	case nr.St != Absent && nr.Ver != r.Ver && nr.Ver <= s.Counter:
		return fmt.Sprintf("versions: v%d handed out again (counter at %d)", nr.Ver, s.Counter)
	}
	return ""
}

// canonical renumbers the versions of s in order (only their order and
// equality matter) and sorts the workers (they run the same program).
func canonical(s State, c *Config) State {
	workers := c.Workers
	// Finished actors keep only what still matters: a request of theirs in
	// flight (what they told their clients is in ToldS/ToldF).
	for i := range s.A {
		a := &s.A[i]
		switch a.PC {
		case wDone, wDead, oDone:
			s.A[i] = Actor{PC: wDone, Msg: a.Msg, MsgLife: a.MsgLife}
			if a.PC == oDone {
				s.A[i].PC = oDone
			}
		case rIdle:
			s.A[i] = Actor{PC: rIdle}
		}
	}
	var arr [5 + 5*numActors]*uint8
	ptrs := append(arr[:0], &s.Rec.Ver, &s.Rec.Token, &s.Rec.Created, &s.Counter, &s.MaxSeen)
	for i := range s.A {
		a := &s.A[i]
		ptrs = append(ptrs, &a.Ver, &a.Tok, &a.Msg, &a.Created, &a.TxVer)
	}
	var vals [len(arr)]uint8
	n := 0
	for _, p := range ptrs {
		if *p != 0 {
			vals[n] = *p
			n++
		}
	}
	vs := vals[:n]
	slices.Sort(vs)
	vs = slices.Compact(vs)
	for _, p := range ptrs {
		if *p != 0 {
			r, _ := slices.BinarySearch(vs, *p)
			*p = uint8(r + 1)
		}
	}
	// Workers: sort, and rename the owner accordingly.
	var perm [MaxWorkers]int
	for i := range perm {
		perm[i] = i
	}
	// DoTx workers and runtime.Do workers run different programs: each
	// group is sorted on its own.
	// Two workers alike are told apart by what the record names them as
	// (its owner, its transaction, its lock's holder), so that the form
	// does not depend on where each stood.
	owner, xact, held := s.Rec.Owner, s.Rec.XactBy, s.Rec.HeldBy
	role := func(i int) uint8 {
		return b2u(owner == int8(i) && !c.SharedOwner) | b2u(xact == uint8(i)+1)<<1 | b2u(held == uint8(i)+1)<<2
	}
	byActor := func(a, b int) int {
		if d := compareActors(&s.A[a], &s.A[b]); d != 0 {
			return d
		}
		return int(role(a)) - int(role(b))
	}
	tx := min(c.TxWorkers, workers)
	slices.SortStableFunc(perm[:tx], byActor)
	slices.SortStableFunc(perm[tx:workers], byActor)
	old := s.A
	for i := range workers {
		s.A[i] = old[perm[i]]
		if owner == int8(perm[i]) && !c.SharedOwner {
			s.Rec.Owner = int8(i)
		}
		if xact == uint8(perm[i])+1 {
			s.Rec.XactBy = uint8(i) + 1
		}
		if held == uint8(perm[i])+1 {
			s.Rec.HeldBy = uint8(i) + 1
		}
	}
	return s
}

func compareActors(a, b *Actor) int {
	ka := [...]uint8{uint8(a.PC), uint8(a.St), a.Ver, a.Known, uint8(a.Out), a.Tok, b2u(a.Tried), a.Life, a.Msg, a.MsgLife, uint8(a.Told), b2u(a.Late), uint8(a.Then), a.Tx, a.TxVer}
	kb := [...]uint8{uint8(b.PC), uint8(b.St), b.Ver, b.Known, uint8(b.Out), b.Tok, b2u(b.Tried), b.Life, b.Msg, b.MsgLife, uint8(b.Told), b2u(b.Late), uint8(b.Then), b.Tx, b.TxVer}
	return slices.Compare(ka[:], kb[:])
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
