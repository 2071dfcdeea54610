package model

import "fmt"

// St is a record state; Absent is no record.
type St uint8

// The record states.
const (
	Absent St = iota
	Processing
	Success
	Failed
	Unknown
)

func (s St) String() string {
	return [...]string{"absent", "PROCESSING", "SUCCESS", "FAILED", "UNKNOWN"}[s]
}

// Final reports whether s is SUCCESS or FAILED.
func (s St) Final() bool { return s == Success || s == Failed }

// Owner ids: workers are 0..MaxWorkers-1.
const (
	MaxWorkers        = 3
	Reconciler   int8 = MaxWorkers
	Operator     int8 = MaxWorkers + 1
	numActors         = MaxWorkers + 2
	NoOwner      int8 = -1
	maxLives          = 2
	lease             = 3 // ticks a granted lease lasts, by the store's clock (renewed every tick)
	known             = 2 // ticks the grantee knows it holds it: lease minus the margin of the lease rule
	holdOff           = 1 // ticks an UNKNOWN record is held off after "cannot tell", and a handed-back lease
	ttl               = 1 // ticks a final record lives before it may be swept or replaced
	neverExpires int8 = -1
)

func ownerName(o int8) string {
	switch {
	case o == NoOwner:
		return "-"
	case o == Reconciler:
		return "rec"
	case o == Operator:
		return "op"
	}
	return fmt.Sprintf("w%d", o)
}

// Rec is the record as the store holds it. Times are ticks left.
type Rec struct {
	St    St
	Owner int8
	Ver   uint8
	// Lease is the ticks left of the owner's lease (0: none or expired).
	Lease uint8
	// TTL is the ticks left before a final record may be swept (0: it
	// may; neverExpires in the last life the model allows).
	TTL       int8
	Attempts  uint8
	Takeovers uint8
	Token     uint8
	// Created is the version the record was created with: it stands for
	// CreatedAt, which Resolve compares.
	Created uint8
	// Life counts the record's lives: a TTL replacement or a sweep starts
	// a new one (a release does not: the retry is the same request).
	Life   uint8
	GaveUp bool
	// XactBy names the transaction of the DoTx worker whose claim this is
	// (worker id + 1; 0: none): pgstore's xact column. While that
	// transaction is open the claim is as live as its lease; once it ends
	// without the SUCCESS write, the lease counts as ended (the model ends
	// it then: see endTx).
	XactBy uint8
	// HeldBy is the DoTx worker (id + 1; 0: none) whose open transaction
	// wrote SUCCESS over this row and holds its lock: the record read is
	// still the committed one, claims find it in progress, and other
	// writes wait for the transaction to end.
	HeldBy uint8
}

func (r Rec) String() string {
	if r.St == Absent {
		return "absent"
	}
	s := fmt.Sprintf("%s v%d owner=%s", r.St, r.Ver, ownerName(r.Owner))
	if r.Lease > 0 {
		s += fmt.Sprintf(" lease=%d", r.Lease)
	}
	if r.St.Final() {
		s += fmt.Sprintf(" ttl=%d", r.TTL)
	}
	if r.Attempts > 0 {
		s += fmt.Sprintf(" attempts=%d", r.Attempts)
	}
	if r.Takeovers > 0 {
		s += fmt.Sprintf(" takeovers=%d", r.Takeovers)
	}
	if r.Token != 0 {
		s += fmt.Sprintf(" token=t%d", r.Token)
	}
	if r.GaveUp {
		s += " gave-up"
	}
	if r.XactBy != 0 {
		s += fmt.Sprintf(" xact=w%d", r.XactBy-1)
	}
	if r.HeldBy != 0 {
		s += fmt.Sprintf(" held-by=w%d", r.HeldBy-1)
	}
	return s + fmt.Sprintf(" life=%d", r.Life)
}

// OpKind names a store operation.
type OpKind uint8

// The store operations.
const (
	OpNone OpKind = iota
	OpClaim
	OpGet
	OpTransition
	OpRenew
	OpRelease
	OpAcquire
	OpSweep
)

func (k OpKind) String() string {
	return [...]string{"-", "Claim", "Get", "Transition", "Renew", "Release", "AcquirePending", "Sweep"}[k]
}

// Op is one store operation with its parameters (the fields its kind uses).
type Op struct {
	Kind  OpKind
	Owner int8
	// From/Ver/Owner: the (state, owner, version) a compare-and-set expects.
	From St
	Ver  uint8
	To   St
	// NewOwner after a Transition.
	NewOwner int8
	// Lease in ticks (0: none).
	Lease uint8
	// TTL in ticks for a final Transition (neverExpires: the last life).
	TTL            int8
	Token          uint8
	AcquireUnknown bool
	MaxAttempts    uint8
	GaveUp         bool
	// KeepNote: a Transition that carries the note of the record it
	// replaces (the runtime's inline query that cannot tell writes the
	// Note of the record it asked under: the version it checks is the
	// one that note came with), so GaveUp is the record's, not the op's.
	KeepNote bool
}

// Err is a store operation's error.
type Err uint8

// The errors the model's store returns.
const (
	OK Err = iota
	ErrLeaseLost
	ErrNotFound
)

func (e Err) String() string { return [...]string{"ok", "ErrLeaseLost", "ErrNotFound"}[e] }

// OpResult is what a store operation returned.
type OpResult struct {
	Err     Err
	Claimed bool
	// Takeover: a Claim took over an expired PROCESSING lease.
	Takeover bool
	// Rec is the record a Claim, Get or AcquirePending returned (Absent
	// when AcquirePending took none).
	Rec Rec
	// Ver is a Transition's new version.
	Ver uint8
	// N is how many records Sweep deleted.
	N int
	// Busy: a Claim found the row held by an open transaction that wrote
	// its outcome (pgstore answers ErrInProgress without waiting).
	Busy bool
	// Blocked: the write would wait for the lock of such a transaction;
	// the step is not enabled until it ends.
	Blocked bool
}

func (r OpResult) String() string {
	switch {
	case r.Err != OK:
		return r.Err.String()
	case r.Busy:
		return "in progress (row held)"
	case r.Rec.St != Absent && r.Claimed:
		return "claimed: " + r.Rec.String()
	case r.Rec.St != Absent:
		return r.Rec.String()
	case r.Ver != 0:
		return fmt.Sprintf("v%d", r.Ver)
	}
	return "ok"
}

// Mutation breaks one guard of the model, to show the checker finds what
// the guard prevents.
type Mutation uint8

// The mutations.
const (
	NoMutation Mutation = iota
	// MutClaimIgnoresLease: Claim takes over a PROCESSING record whose
	// lease is live.
	MutClaimIgnoresLease
	// MutAcquireIgnoresLease: AcquirePending takes records whose lease is
	// live.
	MutAcquireIgnoresLease
	// MutTransitionNoVersion: Transition's compare-and-set checks state
	// and owner but not the version.
	MutTransitionNoVersion
	// MutRenewNoCAS: Renew extends whatever record there is.
	MutRenewNoCAS
	// MutNoLeaseRule: a worker believes its lease until a renewal says
	// it is lost, and keeps running its effect meanwhile (renewal without
	// the lease rule: issue 16's bug 2).
	MutNoLeaseRule
	// MutNoFencing: the downstream accepts stale tokens.
	MutNoFencing
	// MutNoCASBeforeEffect: after a query says "did not happen", the worker
	// runs the effect without the compare-and-set to a new version.
	MutNoCASBeforeEffect
	// MutTokenSurvivesWrites: a claim or an acquisition keeps the token of
	// the last transition (instead of clearing it).
	MutTokenSurvivesWrites
	// MutTxWindow: DoTx names no transaction on its claim and ends the
	// claim's lease (committed on its own) when the effect returns, just
	// before writing SUCCESS in the caller's transaction (an earlier
	// design's window).
	MutTxWindow
)

var mutationNames = [...]string{"none", "claim-ignores-lease", "acquire-ignores-lease", "transition-without-version",
	"renew-without-cas", "no-lease-rule", "no-fencing", "no-cas-before-effect", "token-survives-writes", "dotx-window"}

func (m Mutation) String() string { return mutationNames[m] }

// newVersion draws a version (or a token) from the store-wide counter.
func (s *State) newVersion() uint8 {
	s.Counter++
	return s.Counter
}

// held reports whether the record is in (st, owner, ver).
func (s *State) held(st St, owner int8, ver uint8, mut Mutation) bool {
	r := &s.Rec
	if r.St == Absent || r.St != st || r.Owner != owner {
		return false
	}
	return r.Ver == ver || mut == MutTransitionNoVersion
}

// apply runs one store operation atomically, with the guards of memstore
// (pgstore's statements and redisstore's scripts implement the same; see
// [Replay]).
func (s *State) apply(op Op, mut Mutation) OpResult {
	r := &s.Rec
	if r.HeldBy != 0 {
		switch op.Kind {
		case OpClaim:
			return OpResult{Rec: *r, Busy: true}
		case OpTransition, OpRenew, OpRelease:
			return OpResult{Blocked: true}
		case OpAcquire:
			return OpResult{} // SKIP LOCKED
		}
	}
	switch op.Kind {
	case OpClaim:
		switch {
		case op.Ver != 0 && r.St != Absent && r.Ver != op.Ver:
			return OpResult{Rec: *r} // not at the version the caller read (ClaimParams.IfVersion)
		case r.St == Absent || (r.St.Final() && r.TTL == 0):
			if r.St != Absent {
				s.Life++ // a TTL replacement: a new life of the identity
			}
			v := s.newVersion()
			*r = Rec{St: Processing, Owner: op.Owner, Ver: v, Lease: op.Lease, Created: v, Life: s.Life}
		case r.St == Processing && (r.Lease == 0 || mut == MutClaimIgnoresLease):
			r.Owner, r.Ver, r.Lease, r.XactBy = op.Owner, s.newVersion(), op.Lease, 0
			if mut != MutTokenSurvivesWrites {
				r.Token = 0
			}
			r.Takeovers = min(r.Takeovers+1, 2)
			return OpResult{Claimed: true, Takeover: true, Rec: *r}
		case op.AcquireUnknown && r.St == Unknown && r.Lease == 0:
			r.Owner, r.Ver, r.Lease, r.XactBy = op.Owner, s.newVersion(), op.Lease, 0
			if mut != MutTokenSurvivesWrites {
				r.Token = 0
			}
		default:
			return OpResult{Rec: *r}
		}
		return OpResult{Claimed: true, Rec: *r}
	case OpGet:
		if r.St == Absent {
			return OpResult{Err: ErrNotFound}
		}
		return OpResult{Rec: *r}
	case OpTransition:
		if !s.held(op.From, op.Owner, op.Ver, mut) {
			if r.St != Absent && op.Token != 0 && r.Token == op.Token {
				return OpResult{Ver: r.Ver} // this very write, retried after its reply was lost
			}
			return OpResult{Err: ErrLeaseLost}
		}
		gaveUp := op.GaveUp
		if op.KeepNote {
			gaveUp = r.GaveUp
		}
		r.St, r.Owner, r.Ver, r.Token, r.Lease, r.TTL, r.GaveUp, r.XactBy = op.To, op.NewOwner, s.newVersion(), op.Token, op.Lease, 0, gaveUp, 0
		if op.To == Processing {
			r.Attempts = 0 // a new run of the effect: its outcome gets every attempt
		}
		if op.To.Final() {
			r.TTL, r.Lease = op.TTL, 0
		}
		return OpResult{Ver: r.Ver}
	case OpRenew:
		if !s.held(op.From, op.Owner, op.Ver, mut) && !(mut == MutRenewNoCAS && r.St != Absent) {
			return OpResult{Err: ErrLeaseLost}
		}
		r.Lease = op.Lease
		return OpResult{}
	case OpRelease:
		if !s.held(op.From, op.Owner, op.Ver, mut) {
			return OpResult{Err: ErrLeaseLost}
		}
		*r = Rec{Owner: NoOwner}
		return OpResult{}
	case OpAcquire:
		free := r.Lease == 0 || mut == MutAcquireIgnoresLease
		due := (r.St == Processing && free) ||
			(r.St == Unknown && free && (op.MaxAttempts == 0 || r.Attempts < op.MaxAttempts))
		if !due {
			return OpResult{}
		}
		r.St, r.Owner, r.Ver, r.Lease, r.XactBy = Unknown, op.Owner, s.newVersion(), op.Lease, 0
		if mut != MutTokenSurvivesWrites {
			r.Token = 0
		}
		r.Attempts = min(r.Attempts+1, 7)
		return OpResult{Rec: *r}
	case OpSweep:
		if r.St.Final() && r.TTL == 0 {
			*r = Rec{Owner: NoOwner}
			s.Life++
			return OpResult{N: 1}
		}
		return OpResult{}
	}
	panic(fmt.Sprintf("model: unknown store operation %d", op.Kind))
}

// finalTTL is the TTL of a final write: the last life the model allows
// never expires, which bounds the lives explored.
func (s *State) finalTTL() int8 {
	if s.Life+1 >= maxLives {
		return neverExpires
	}
	return ttl
}
