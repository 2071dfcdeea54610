package sim

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
)

// Config describes one simulation run. Only Store is required.
type Config struct {
	// Name labels the run in logs and reports ("memstore", "pgstore", ...).
	Name string
	// Store is the store under test, shared by every worker. Runs isolate
	// themselves by a unique scope and unique operation names, so the store
	// may be shared with other tests.
	Store runtime.Store
	// Seed fixes the schedule; 0 takes IDEM_SIM_SEED, or a random seed.
	Seed uint64
	// NoStallExcuses reports every breach, even one a measured stall of
	// the process excuses (see [Report.Excused]).
	NoStallExcuses bool
	// Requests is the number of client requests (default 200), Keys the
	// number of keys per operation (default Requests/5), Workers the number
	// of runtimes (default 6).
	Requests, Keys, Workers int
	// Lease and TTL are the runtime's (defaults 500ms and 4 leases).
	Lease, TTL time.Duration
	// Spread is how long requests keep arriving (default 12 leases).
	Spread time.Duration
	// Clock, when the store runs on it, lets the run jump the store's clock;
	// without it the run stalls the store instead (see the package doc).
	Clock *Clock
	// RecordLimit is the store's limit on a stored response: large responses
	// are made bigger than it (default 4096). EnforceRecordLimit makes the
	// wrapper refuse larger responses with runtime.ErrTooLarge, for stores
	// without a limit of their own (memstore).
	RecordLimit        int
	EnforceRecordLimit bool
	// Faults are the fault rates; nil means DefaultFaults.
	Faults *Faults
	// MaxAttempts is the reconciler's (default 4).
	MaxAttempts int
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "store"
	}
	if c.Requests <= 0 {
		c.Requests = 200
	}
	if n, err := strconv.Atoi(os.Getenv(ScaleVar)); err == nil && n > 1 {
		c.Requests *= n
		c.Spread *= time.Duration(n)
	}
	if c.Keys <= 0 {
		c.Keys = max(4, c.Requests/5)
	}
	if c.Workers <= 0 {
		c.Workers = 6
	}
	if c.Lease <= 0 {
		c.Lease = 500 * time.Millisecond
	}
	if c.TTL <= 0 {
		c.TTL = 4 * c.Lease
	}
	if c.Spread <= 0 {
		c.Spread = 12 * c.Lease * time.Duration(max(1, c.Requests/200))
	}
	if c.RecordLimit <= 0 {
		c.RecordLimit = 4096
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 4
	}
	return c
}

// Environment variables read by [Runs] and [Run].
const (
	SeedVar     = "IDEM_SIM_SEED"
	DurationVar = "IDEM_SIM_DURATION"
	ScaleVar    = "IDEM_SIM_SCALE"
	// ShowVar sets how many violations of each invariant a run prints in
	// full (default 3).
	ShowVar = "IDEM_SIM_SHOW"
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	Identity  runtime.Identity
	Detail    string
	// Events are the identity's last events: client calls, store operations
	// as the wrapper recorded them, downstream effects, injected faults.
	Events []string
}

func (v Violation) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s: %s %q: %s", v.Invariant, v.Identity.Operation, v.Identity.Key, v.Detail)
	if len(v.Events) > 0 {
		b.WriteString("\n  events:\n")
		ev := v.Events
		if len(ev) > 40 {
			b.WriteString("    ...\n")
			ev = ev[len(ev)-40:]
		}
		for _, e := range ev {
			b.WriteString("    " + e + "\n")
		}
	}
	return b.String()
}

// Report is what a run explored and found.
type Report struct {
	Name       string
	Seed       uint64
	Requests   int
	Deliveries int
	// StoreOps is the number of store calls the wrapper recorded.
	StoreOps int
	// Faults counts the injected faults by kind.
	Faults map[string]int
	// Outcomes counts the clients' answers by kind.
	Outcomes map[string]int
	// Events counts the runtime's observer events by kind.
	Events  map[string]int
	Effects int
	// Window counts the extra effects of operations without a Query that
	// the at-least-once window explains (see the package doc).
	Window int
	// Stale counts downstream requests rejected by the fence.
	Stale int
	// Linearizability: identities checked, skipped (ambiguous store
	// errors) and undecided (checker timeout).
	Checked, Skipped, Undecided int
	Violations                  []Violation
	// Excused are breaches of "lease held at effect start" that a stall
	// of the whole process explains: the run measured a scheduler stall
	// (internal/stall) past the lease rule's margin (a tenth of the
	// lease), long enough for a lease confirmed before the effect to run
	// out before the effect's first line. They are logged, not failed.
	// Stall is the longest stall measured (zero in virtual time).
	Excused []Violation
	Stall   time.Duration
	Elapsed time.Duration
}

// Summary is the one-line summary a run logs (bench/soak.sh reads it).
func (r Report) Summary() string {
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	return fmt.Sprintf("sim-summary name=%s seed=%d requests=%d deliveries=%d store_ops=%d faults=%d effects=%d window=%d stale=%d linearizable_checked=%d skipped=%d undecided=%d violations=%d elapsed=%s",
		r.Name, r.Seed, r.Requests, r.Deliveries, r.StoreOps, faults, r.Effects, r.Window, r.Stale, r.Checked, r.Skipped, r.Undecided, len(r.Violations), r.Elapsed.Round(time.Millisecond))
}

// Runs runs the simulation once per seed: the seed of IDEM_SIM_SEED alone
// when it is set, else random seeds, n runs (at least one), or as many as
// fit in IDEM_SIM_DURATION (a Go duration). Each run is a subtest named by
// its seed.
func Runs(t *testing.T, n int, run func(t *testing.T, seed uint64)) {
	t.Helper()
	if v := os.Getenv(SeedVar); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil || seed == 0 {
			t.Fatalf("%s=%q: want a positive integer", SeedVar, v)
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { run(t, seed) })
		return
	}
	var d time.Duration
	if v := os.Getenv(DurationVar); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("%s=%q: %v", DurationVar, v, err)
		}
	}
	deadline := time.Now().Add(d)
	for i := 1; ; i++ {
		seed := randomSeed()
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { run(t, seed) })
		if d > 0 && time.Now().After(deadline) || d == 0 && i >= n {
			return
		}
	}
}

// Regressions runs run with each of [RegressionSeeds], as subtests named
// after the seed (skipped when IDEM_SIM_SEED picks one seed).
func Regressions(t *testing.T, run func(t *testing.T, seed uint64)) {
	t.Helper()
	if os.Getenv(SeedVar) != "" {
		return
	}
	for _, r := range RegressionSeeds {
		t.Run(fmt.Sprintf("regression-seed=%d", r.Seed), func(t *testing.T) { run(t, r.Seed) })
	}
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}

// Run runs one simulation and checks its invariants: each violation fails
// t (with the seed), and the report is returned.
func Run(t testing.TB, cfg Config) Report {
	t.Helper()
	if cfg.Store == nil {
		t.Fatal("sim: Config.Store is nil")
	}
	cfg = cfg.withDefaults()
	seed := cfg.Seed
	if seed == 0 {
		if v := os.Getenv(SeedVar); v != "" {
			seed, _ = strconv.ParseUint(v, 10, 64)
		}
		if seed == 0 {
			seed = randomSeed()
		}
	}
	t.Logf("sim %s: seed %d (replay with %s=%d)", cfg.Name, seed, SeedVar, seed)
	s := newSim(t, cfg, seed)
	rep := s.run()
	t.Log(rep.Summary())
	t.Logf("sim %s seed %d: faults %v; outcomes %v; events %v", cfg.Name, seed, rep.Faults, rep.Outcomes, rep.Events)
	for _, v := range rep.Excused {
		t.Logf("sim %s seed %d: excused by a measured stall of the process (%v, past the lease rule's margin %v): %s", cfg.Name, seed, rep.Stall, cfg.Lease/10, v)
	}
	if len(rep.Violations) > 0 {
		kinds := map[string]int{}
		for _, v := range rep.Violations {
			kinds[v.Invariant]++
		}
		t.Errorf("sim %s seed %d: %d violations by invariant: %v (replay with %s=%d; once fixed, add the seed to sim.RegressionSeeds)", cfg.Name, seed, len(rep.Violations), kinds, SeedVar, seed)
	}
	// At most three of each invariant (IDEM_SIM_SHOW), in full.
	limit := 3
	if n, err := strconv.Atoi(os.Getenv(ShowVar)); err == nil && n > 0 {
		limit = n
	}
	shown := map[string]int{}
	for _, v := range rep.Violations {
		if shown[v.Invariant]++; shown[v.Invariant] > limit {
			continue
		}
		t.Errorf("sim %s seed %d (replay with %s=%d): %s", cfg.Name, seed, SeedVar, seed, v)
	}
	return rep
}

// The two operations of a run.
const (
	opWithQuery = iota
	opNoQuery
)

type mode int

const (
	modeOK mode = iota
	modeLostReply
	modeTimeoutBefore
	modeRetryable
	modePermanent
	modeUnclassified
	modePauseBefore
	modePauseAfter
	modeDie
	modeCancelEffect
)

func (m mode) String() string {
	switch m {
	case modeOK:
		return "ok"
	case modeLostReply:
		return "reply-lost"
	case modeTimeoutBefore:
		return "timeout-before"
	case modeRetryable:
		return "retryable"
	case modePermanent:
		return "permanent"
	case modeUnclassified:
		return "unclassified"
	case modePauseBefore:
		return "pause-before-effect"
	case modePauseAfter:
		return "pause-after-effect"
	case modeDie:
		return "die"
	case modeCancelEffect:
		return "cancel-during-effect"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

type cancelPoint int

const (
	cancelNone cancelPoint = iota
	cancelClaim
	cancelCompletion
)

// plan is what the schedule decided for one delivery.
type plan struct {
	at         time.Duration
	worker     int
	mode       mode
	cancel     cancelPoint
	dieApplied bool
	variant    int // shape of the timeout error
}

type request struct {
	id    int
	op    int
	key   string
	req   Req
	plans []plan
}

// call is one delivery of a request: one runtime.Do.
type call struct {
	id     int
	req    *request
	plan   plan
	fp     []byte
	cancel context.CancelCauseFunc

	cancelled   atomic.Bool
	frozenUntil atomic.Pointer[time.Time]
	// renewDownUntil: the worker's renewals fail until then (its link to
	// the store broke after a renewal whose reply came late).
	renewDownUntil atomic.Pointer[time.Time]
	dead           atomic.Bool
	version        atomic.Int64
	life           atomic.Int64 // the record life of version, when the call saw it
	done           chan struct{}
	deadCh         chan struct{}

	mu           sync.Mutex
	counters     map[string]uint64
	faults       []string
	claims       int
	firstForeign bool
	anyForeign   bool
	recorded     []byte // the SUCCESS response this call's own transition stored
	hasRecorded  bool
	// recordAnswered: a SUCCESS write of this call was answered as done
	// (false when every one the store applied answered after the call's
	// completion deadline, or failed).
	recordAnswered bool
	applied        *Receipt // the receipt of the effect this call applied
	start, end     int64
	resp           Receipt
	err            error
}

type callKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (c *call) cancelOnce() bool {
	if c.cancelled.CompareAndSwap(false, true) {
		c.cancel(nil)
		return true
	}
	return false
}

func (c *call) sawClaim(p runtime.ClaimParams, res runtime.ClaimResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	foreign := !bytes.Equal(res.Record.Fingerprint, p.Fingerprint)
	if c.claims == 0 && !res.Claimed && foreign {
		c.firstForeign = true
	}
	c.anyForeign = c.anyForeign || foreign
	c.claims++
}

// observe notes the version a call saw, and its record life at that moment
// (a store that reuses versions makes the mapping change later).
func (s *sim) observe(c *call, id runtime.Identity, v int64) {
	c.version.Store(v)
	c.life.Store(int64(s.rec.lifeOf(id, v)))
}

// sawRecord notes a record the call read while waiting.
func (c *call) sawRecord(r runtime.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.anyForeign = c.anyForeign || !bytes.Equal(r.Fingerprint, c.fp)
}

func (c *call) recordedSuccess(resp []byte) {
	c.mu.Lock()
	c.recorded, c.hasRecorded = append([]byte(nil), resp...), true
	c.mu.Unlock()
}

func (c *call) successAnswered() {
	c.mu.Lock()
	c.recordAnswered = true
	c.mu.Unlock()
}

func (c *call) faulted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.faults...)
}

// sim is one run.
type sim struct {
	t      testing.TB
	cfg    Config
	faults Faults
	seed   uint64
	runID  string
	scope  string
	ops    [2]string
	base   context.Context

	rec  *recorder
	down *downstream

	faultsOn   atomic.Bool
	stallUntil atomic.Pointer[time.Time]
	// clockJumps counts the store clock's jumps so far: a jump ends
	// leases early, which the lease rule cannot foresee.
	clockJumps atomic.Int64
	// running are the effects running now, per identity (guarded by mu).
	running  map[runtime.Identity][]*runningEffect
	teardown chan struct{}
	bgCount  atomic.Uint64

	workers    []*runtime.Runtime
	reconciler *runtime.Reconciler
	sweeper    *runtime.Sweeper

	requests []*request
	calls    []*call
	callsMu  sync.Mutex

	mu         sync.Mutex
	counts     map[string]int
	events     map[string]int
	gaveUp     map[string]int
	windows    [][2]int64 // global faults, in recorder ticks
	violations []Violation
	// stallable are breaches a measured stall may excuse (Report.Excused).
	stallable []Violation
	stall     time.Duration
	outcomes  map[string]int
}

func newSim(t testing.TB, cfg Config, seed uint64) *sim {
	var b [4]byte
	_, _ = crand.Read(b[:])
	runID := fmt.Sprintf("%s-%d-%s", cfg.Name, seed, hex.EncodeToString(b[:]))
	f := DefaultFaults()
	if cfg.Faults != nil {
		f = *cfg.Faults
	}
	if f.QueryLag == 0 && cfg.Faults == nil {
		f.QueryLag = cfg.Lease
	}
	s := &sim{
		t: t, cfg: cfg, faults: f, seed: seed, runID: runID, scope: "sim/" + runID,
		ops:      [2]string{"Sim.Charge." + runID, "Sim.Notify." + runID},
		rec:      newRecorder(),
		down:     newDownstream(f.QueryLag, cfg.RecordLimit+256),
		teardown: make(chan struct{}),
		counts:   map[string]int{}, events: map[string]int{}, gaveUp: map[string]int{}, outcomes: map[string]int{},
	}
	s.base = runtime.WithScope(context.Background(), s.scope)
	return s
}

// mix is a splitmix64 step over the seed and the parts.
func mix(parts ...uint64) uint64 {
	var h uint64 = 0x9e3779b97f4a7c15
	for _, p := range parts {
		h ^= p + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

func strHash(s string) uint64 {
	var h uint64 = 1469598103934665603
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// roll returns the next fault decision of a stream: a function of the seed,
// the call and the decision's rank in the call's stream, so that the same
// seed makes the same decisions whatever the interleaving of calls.
func (s *sim) roll(c *call, stream string) uint64 {
	if c == nil {
		return mix(s.seed, strHash(stream), s.bgCount.Add(1))
	}
	c.mu.Lock()
	if c.counters == nil {
		c.counters = map[string]uint64{}
	}
	c.counters[stream]++
	n := c.counters[stream]
	c.mu.Unlock()
	return mix(s.seed, uint64(c.id)+1, strHash(stream), n)
}

func (s *sim) sleep(d time.Duration) { time.Sleep(d) }

func (s *sim) waitStall() {
	if until := s.stallUntil.Load(); until != nil {
		if d := time.Until(*until); d > 0 {
			s.sleep(d)
		}
	}
}

func (s *sim) count(kind string) {
	s.mu.Lock()
	s.counts[kind]++
	s.mu.Unlock()
}

func (s *sim) callFault(c *call, what string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.faults = append(c.faults, what)
	c.mu.Unlock()
	s.rec.note(s.identity(c.req), "fault: call %d: %s", c.id, what)
}

// violateUnlessStalled records v as a breach that a measured stall of the
// process may excuse (Report.Excused).
func (s *sim) violateUnlessStalled(v Violation) {
	if v.Events == nil {
		v.Events = s.rec.trailOf(v.Identity)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stallable = append(s.stallable, v)
}

func (s *sim) violate(v Violation) {
	if v.Events == nil {
		v.Events = s.rec.trailOf(v.Identity)
	}
	s.mu.Lock()
	s.violations = append(s.violations, v)
	s.mu.Unlock()
}

func (s *sim) identity(r *request) runtime.Identity {
	return runtime.Identity{Scope: s.scope, Operation: s.ops[r.op], Key: r.key}
}

func (s *sim) allAmbiguous(why string) {
	for _, r := range s.requests {
		s.rec.markAmbiguous(s.identity(r), why)
	}
}

// schedule draws the requests and their deliveries from the seed.
func (s *sim) schedule() {
	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))
	cfg, f := s.cfg, s.faults
	large := map[[2]int]bool{}
	for op := range 2 {
		for k := range cfg.Keys {
			large[[2]int{op, k}] = rng.IntN(1000) < f.LargeResponse
		}
	}
	for i := range cfg.Requests {
		op := opWithQuery
		if rng.IntN(100) >= 65 {
			op = opNoQuery
		}
		k := rng.IntN(cfg.Keys)
		r := &request{id: i, op: op, key: fmt.Sprintf("k%03d", k),
			req: Req{Account: "acct", Amount: int64(100 + k), Large: large[[2]int{op, k}]}}
		if rng.IntN(1000) < f.KeyReuse {
			r.req.Amount += int64(1 + rng.IntN(3))
			r.req.Large = false
		}
		at := time.Duration(rng.Int64N(int64(cfg.Spread)))
		if rng.IntN(1000) < f.Storm {
			s.storm(rng, r, at)
			s.requests = append(s.requests, r)
			continue
		}
		n := 1
		switch p := rng.IntN(100); {
		case p >= 90:
			n = 4
		case p >= 70:
			n = 3
		case p >= 40:
			n = 2
		}
		for d := range n {
			if d > 0 {
				switch p := rng.IntN(100); {
				case p < 30: // a concurrent duplicate
				case p < 60:
					at += time.Duration(rng.Int64N(int64(cfg.Lease / 2)))
				case p < 85:
					at += cfg.Lease + time.Duration(rng.Int64N(int64(2*cfg.Lease)))
				default: // after the TTL
					at += cfg.TTL + time.Duration(rng.Int64N(int64(cfg.Lease)))
				}
			}
			pl := plan{at: at, worker: rng.IntN(cfg.Workers), variant: rng.IntN(3), dieApplied: rng.IntN(2) == 0}
			p, acc := rng.IntN(1000), 0
			for _, m := range []struct {
				rate int
				m    mode
			}{
				{f.Pause / 2, modePauseBefore}, {f.Pause - f.Pause/2, modePauseAfter}, {f.Die, modeDie},
				{f.LostReply, modeLostReply}, {f.TimeoutBefore, modeTimeoutBefore}, {f.Retryable, modeRetryable},
				{f.Permanent, modePermanent}, {f.Unclassified, modeUnclassified}, {f.CancelEffect, modeCancelEffect},
			} {
				acc += m.rate
				if p < acc {
					pl.mode = m.m
					break
				}
			}
			switch q := rng.IntN(1000); {
			case q < f.CancelClaim:
				pl.cancel = cancelClaim
			case q < f.CancelClaim+f.CancelCompletion:
				pl.cancel = cancelCompletion
			}
			r.plans = append(r.plans, pl)
		}
		s.requests = append(s.requests, r)
	}
}

// storm plans a takeover storm: a first delivery that dies or pauses past
// its lease, then deliveries spaced a little over a lease apart, so that
// each finds the previous takeover's lease expired while that one may still
// be querying.
func (s *sim) storm(rng *rand.Rand, r *request, at time.Duration) {
	first := modeDie
	if rng.IntN(2) == 0 {
		first = modePauseAfter
	}
	r.plans = append(r.plans, plan{at: at, worker: rng.IntN(s.cfg.Workers), mode: first, dieApplied: rng.IntN(2) == 0})
	for range 4 {
		// Just after the previous lease ends: before the reconciler, which
		// passes every quarter lease, acquires the record.
		at += s.cfg.Lease + 5*time.Millisecond + time.Duration(rng.Int64N(int64(s.cfg.Lease/10)))
		r.plans = append(r.plans, plan{at: at, worker: rng.IntN(s.cfg.Workers)})
	}
}

func (s *sim) setup() error {
	cfg := s.cfg
	// Workers take the three error policies in turn.
	policies := []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.RecordFailed, runtime.ReleaseRecord}
	var base runtime.Store = cfg.Store
	if cfg.EnforceRecordLimit {
		base = LimitStore{Store: base, Limit: cfg.RecordLimit}
	}
	obs := runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventPhase {
			return
		}
		s.mu.Lock()
		s.events[e.Kind.String()]++
		if e.Kind == runtime.EventReconcileGaveUp {
			s.gaveUp[e.Operation]++
		}
		s.mu.Unlock()
	})
	opts := func(owner string, policy runtime.ErrorPolicy) []runtime.Option {
		return []runtime.Option{
			runtime.WithOwner(owner), runtime.WithLease(cfg.Lease), runtime.WithTTL(cfg.TTL),
			runtime.WithMaxWait(cfg.Lease / 2), runtime.WithCompletionTimeout(4 * cfg.Lease),
			runtime.WithQueryTimeout(3 * cfg.Lease), runtime.WithErrorPolicy(policy),
			runtime.WithObserver(obs), runtime.WithRecoverPanics(true),
		}
	}
	for i := range cfg.Workers {
		fs := &faultStore{Store: base, s: s, worker: fmt.Sprintf("w%d(%v)", i, policies[i%len(policies)])}
		rt, err := runtime.New(fs, opts(fmt.Sprintf("%s/w%d", s.runID, i), policies[i%len(policies)])...)
		if err != nil {
			return err
		}
		s.workers = append(s.workers, rt)
	}
	rrt, err := runtime.New(&faultStore{Store: base, s: s, worker: "reconciler"}, opts(s.runID+"/r", runtime.RecordUnknown)...)
	if err != nil {
		return err
	}
	if err := runtime.Register(rrt, s.ops[opWithQuery], s.query, runtime.QueryOptions{TTL: cfg.TTL}); err != nil {
		return err
	}
	// The operation without a Query converges by its no-query policy: its
	// UNKNOWN records are released a lease after their claim, so the final
	// retry runs the effect again (the at-least-once window it measures).
	if err := runtime.RegisterNoQuery(rrt, s.ops[opNoQuery], runtime.NoQueryPolicy{After: cfg.Lease, Resolve: runtime.NotHappenedRelease}); err != nil {
		return err
	}
	s.reconciler, err = runtime.NewReconciler(rrt, runtime.ReconcileInterval(cfg.Lease/4), runtime.ReconcileLease(cfg.Lease),
		runtime.ReconcileMaxAttempts(cfg.MaxAttempts), runtime.ReconcileBackoff(cfg.Lease/10, cfg.Lease/2), runtime.ReconcileBatch(16))
	if err != nil {
		return err
	}
	s.sweeper, err = runtime.NewSweeper(rrt, runtime.SweepInterval(cfg.TTL/2), runtime.SweepBatch(100))
	return err
}

// query is the operation's Query: the downstream's answer, with injected
// slowness and Unknown answers.
func (s *sim) query(ctx context.Context, r Req) (Receipt, runtime.Outcome, error) {
	c := callFrom(ctx)
	a, _ := runtime.AttemptFrom(ctx)
	who := "reconciler"
	if c != nil {
		who = fmt.Sprintf("call %d", c.id)
	}
	if s.faultsOn.Load() {
		h := s.roll(c, "query")
		switch p := int(h % 1000); {
		case p < s.faults.SlowQuery:
			s.count("slow query")
			s.callFault(c, "slow query")
			slow := s.cfg.Lease * 3 / 2
			if h/1000%2 == 0 { // decides at once, answers late
				rc, o, err := s.down.query(ctx, r)
				s.rec.note(a.ID, "query by %s (token %d, slow, decided first): %v", who, a.FencingToken, o)
				if err := sleepCtx(ctx, slow); err != nil {
					return Receipt{}, runtime.OutcomeUnknown, err
				}
				return rc, o, err
			}
			if err := sleepCtx(ctx, slow); err != nil {
				return Receipt{}, runtime.OutcomeUnknown, err
			}
		case p < s.faults.SlowQuery+s.faults.UnknownQuery:
			s.count("query unknown")
			s.rec.note(a.ID, "query by %s (token %d): injected Unknown", who, a.FencingToken)
			return Receipt{}, runtime.OutcomeUnknown, errors.New("downstream: query unavailable")
		}
	}
	rc, o, err := s.down.query(ctx, r)
	s.rec.note(a.ID, "query by %s (token %d): %v %v", who, a.FencingToken, o, err)
	return rc, o, err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *sim) timeoutErr(variant int) error {
	switch variant {
	case 0:
		return fmt.Errorf("downstream: %w", context.DeadlineExceeded)
	case 1:
		return &net.OpError{Op: "read", Net: "tcp", Err: &timeoutError{"i/o timeout"}}
	}
	return &url.Error{Op: "Post", URL: "https://downstream.invalid/charge", Err: fmt.Errorf("reading response: %w", &timeoutError{"i/o timeout"})}
}

// effect returns the call's effect, which acts as its plan says.
func (s *sim) effect(c *call) func(context.Context, Req) (Receipt, error) {
	return func(ctx context.Context, r Req) (Receipt, error) {
		a, _ := runtime.AttemptFrom(ctx)
		life := s.rec.lifeOf(a.ID, a.FencingToken)
		s.effectStarts(c, a, life)
		defer s.oneOwner(ctx, c, a)()
		apply := func() (Receipt, error) {
			rc, err := s.down.apply(ctx, r, c.id, life)
			if err != nil {
				s.rec.note(a.ID, "effect by call %d (token %d): %v", c.id, a.FencingToken, err)
				return Receipt{}, err
			}
			s.rec.note(a.ID, "effect by call %d (token %d, life %d): applied %s", c.id, a.FencingToken, life, rc.ID)
			c.mu.Lock()
			c.applied = &rc
			c.mu.Unlock()
			return rc, nil
		}
		m := c.plan.mode
		if !s.faultsOn.Load() {
			m = modeOK
		}
		pause := func() {
			d := s.cfg.Lease*3/2 + time.Duration(s.roll(c, "pause")%uint64(s.cfg.Lease))
			until := time.Now().Add(d)
			c.frozenUntil.Store(&until)
			s.count("worker paused past its lease")
			s.callFault(c, fmt.Sprintf("worker paused %v (%s)", d.Round(time.Millisecond), m))
			s.sleep(d)
		}
		switch m {
		case modeLostReply:
			if _, err := apply(); err != nil {
				return Receipt{}, err
			}
			s.count("effect reply lost")
			s.callFault(c, "effect applied, reply lost")
			return Receipt{}, s.timeoutErr(c.plan.variant)
		case modeTimeoutBefore:
			s.count("effect timed out before the downstream")
			return Receipt{}, s.timeoutErr(c.plan.variant)
		case modeRetryable:
			s.count("effect failed retryably")
			return Receipt{}, runtime.Retryable(errors.New("downstream: connection refused"))
		case modePermanent:
			// The downstream declines only a key it has not acted on in
			// this life: one that did would not answer "declined".
			if s.appliedInLife(a, life) {
				return apply()
			}
			s.count("effect declined permanently")
			return Receipt{}, runtime.Permanent(errors.New("downstream: card declined"))
		case modeUnclassified:
			s.count("effect failed unclassified")
			return Receipt{}, errors.New("downstream: 400 bad request")
		case modePauseBefore:
			pause()
			return apply()
		case modePauseAfter:
			rc, err := apply()
			if err != nil {
				return rc, err
			}
			pause()
			return rc, nil
		case modeDie:
			if c.plan.dieApplied {
				if _, err := apply(); err != nil {
					return Receipt{}, err
				}
			}
			s.count("worker died mid-effect")
			s.callFault(c, "worker died mid-effect")
			c.dead.Store(true)
			close(c.deadCh)
			<-s.teardown
			return Receipt{}, s.timeoutErr(0)
		case modeCancelEffect:
			if _, err := apply(); err != nil {
				return Receipt{}, err
			}
			if c.cancelOnce() {
				s.count("cancel during effect")
				s.callFault(c, "cancel during effect (after the downstream applied it)")
			}
			return Receipt{}, fmt.Errorf("downstream: waiting for the reply: %w", ctx.Err())
		}
		return apply()
	}
}

func (s *sim) appliedInLife(a runtime.Attempt, life int) bool {
	for _, e := range s.down.happened(a.DownstreamKey) {
		if e.epoch == life {
			return true
		}
	}
	return false
}

// effectStarts checks, when an effect starts, that the downstream has not
// already applied it in this record life.
func (s *sim) effectStarts(c *call, a runtime.Attempt, life int) {
	s.rec.note(a.ID, "effect starts: call %d (token %d, taken over %v, life %d, plan %s)", c.id, a.FencingToken, a.TakenOver, life, c.plan.mode)
	// The attempt's own write (its claim, or its compare-and-set after the
	// query) must be the last write on the record: anyone else's means the
	// lease was lost before the effect started.
	if w, ok := s.rec.lastWriteOf(a.ID); ok && w.call != c.id {
		who := "the reconciler"
		if w.call >= 0 {
			who = fmt.Sprintf("call %d", w.call)
		}
		s.violateUnlessStalled(Violation{Invariant: "lease held at effect start", Identity: a.ID,
			Detail: fmt.Sprintf("call %d started the effect with token %d after %s wrote the record (%s, @%d): its lease was lost before the effect began; the runtime must keep renewing the lease while it queries and confirm it by compare-and-set right before the effect (a stall of the test machine longer than the lease between that write and the effect would also show here)", c.id, a.FencingToken, who, w.desc, w.tick)})
	}
	if c.req.op != opWithQuery {
		return
	}
	for _, e := range s.down.happened(a.DownstreamKey) {
		if e.epoch == life {
			s.violate(Violation{Invariant: "at-most-once (effect restarted)", Identity: a.ID,
				Detail: fmt.Sprintf("call %d started the effect with token %d although the downstream had applied it in this record life (%s, token %d, by call %d): the runtime must ask the query, holding its lease, and re-check the lease by CAS before running the effect", c.id, a.FencingToken, e.receipt.ID, e.token, e.call)})
			return
		}
	}
}

// runningEffect is an effect in progress.
type runningEffect struct {
	ctx   context.Context
	call  int
	token int64
	jumps int64 // the store clock's jumps when it started
}

// oneOwner checks the lease rule's promise as an effect starts: no other
// effect of the identity is running with its context live. The runtime
// must have told an effect to stop (cancelled its context) before its
// lease could expire, and so before another worker could take the record
// over; a store clock jump since the other effect started excuses it. It
// returns the function that ends the effect's registration.
func (s *sim) oneOwner(ctx context.Context, c *call, a runtime.Attempt) func() {
	me := &runningEffect{ctx: ctx, call: c.id, token: a.FencingToken, jumps: s.clockJumps.Load()}
	s.mu.Lock()
	if s.running == nil {
		s.running = map[runtime.Identity][]*runningEffect{}
	}
	for _, o := range s.running[a.ID] {
		if o.ctx.Err() == nil && o.jumps == me.jumps {
			s.mu.Unlock()
			s.violate(Violation{Invariant: "one owner at a time", Identity: a.ID,
				Detail: fmt.Sprintf("call %d started the effect with token %d while call %d's effect (token %d) still ran with its context live: the runtime must stop an effect whose lease it cannot confirm before the lease can expire", c.id, a.FencingToken, o.call, o.token)})
			s.mu.Lock()
			break
		}
	}
	s.running[a.ID] = append(s.running[a.ID], me)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.running[a.ID]
		for i, o := range list {
			if o == me {
				s.running[a.ID] = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(s.running[a.ID]) == 0 {
			delete(s.running, a.ID)
		}
	}
}

// jumps injects the run's clock jumps or store stalls.
func (s *sim) jumps(ctx context.Context) {
	rng := rand.New(rand.NewPCG(s.seed, 0x10b5))
	var ats []time.Duration
	for range s.faults.Jumps {
		ats = append(ats, time.Duration(rng.Int64N(int64(s.cfg.Spread))))
	}
	start := time.Now()
	slices.Sort(ats)
	for _, at := range ats {
		if sleepCtx(ctx, time.Until(start.Add(at))) != nil {
			return
		}
		from := s.rec.now()
		if s.cfg.Clock != nil {
			d := 2 * s.cfg.Lease
			s.clockJumps.Add(1)
			s.cfg.Clock.Jump(d)
			s.count("store clock jumped")
			s.noteAll(fmt.Sprintf("fault: the store clock jumps %v", d))
			_ = sleepCtx(ctx, s.cfg.Lease)
		} else {
			d := s.cfg.Lease * 3 / 2
			until := time.Now().Add(d)
			s.stallUntil.Store(&until)
			s.count("store stalled past the lease")
			s.noteAll(fmt.Sprintf("fault: every store call stalls %v", d))
			_ = sleepCtx(ctx, d+s.cfg.Lease/2)
		}
		s.mu.Lock()
		s.windows = append(s.windows, [2]int64{from, s.rec.now()})
		s.mu.Unlock()
	}
}

func (s *sim) noteAll(line string) {
	seen := map[runtime.Identity]bool{}
	for _, r := range s.requests {
		id := s.identity(r)
		if !seen[id] {
			seen[id] = true
			s.rec.note(id, "%s", line)
		}
	}
}

// deliver runs one delivery.
func (s *sim) deliver(r *request, pl plan, healthy bool) *call {
	s.callsMu.Lock()
	c := &call{id: len(s.calls), req: r, plan: pl, done: make(chan struct{}), deadCh: make(chan struct{})}
	s.calls = append(s.calls, c)
	s.callsMu.Unlock()
	defer close(c.done)
	ctx, cancel := context.WithCancelCause(s.base)
	defer cancel(nil)
	c.cancel = cancel
	ctx = context.WithValue(ctx, callKey{}, c)
	rt := s.workers[pl.worker]
	cl := runtime.Call[Req, Receipt]{Operation: s.ops[r.op], Key: r.key, Request: r.req, Effect: s.effect(c)}
	if r.op == opWithQuery {
		cl.Query = s.query
	}
	if b, err := rt.Codec().Marshal(r.req); err == nil {
		c.mu.Lock()
		c.fp = runtime.Fingerprint(b)
		c.mu.Unlock()
	}
	id := s.identity(r)
	kind := "delivery"
	if healthy {
		kind = "final retry"
	}
	s.rec.note(id, "call %d starts: %s of request %d (amount %d, large %v) on w%d, plan %s, cancel %d", c.id, kind, r.id, r.req.Amount, r.req.Large, pl.worker, pl.mode, pl.cancel)
	c.mu.Lock()
	c.start = s.rec.now()
	c.mu.Unlock()
	resp, err := runtime.Do(ctx, rt, cl)
	c.mu.Lock()
	c.end, c.resp, c.err = s.rec.now(), resp, err
	c.mu.Unlock()
	s.rec.note(id, "call %d returns: %s %v", c.id, resp.ID, err)
	s.mu.Lock()
	s.outcomes[outcomeOf(err)]++
	s.mu.Unlock()
	return c
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, runtime.ErrKeyReused):
		return "key reused"
	case errors.Is(err, runtime.ErrPermanent):
		return "failed"
	case errors.Is(err, runtime.ErrInProgress):
		return "in progress"
	case errors.Is(err, runtime.ErrOutcomeUnknown):
		return "outcome unknown"
	case errors.Is(err, runtime.ErrLeaseLost):
		return "lease lost"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, errInjected):
		return "store error"
	}
	return "other error"
}

// run executes the schedule, the end phase and the checks.
func (s *sim) run() Report {
	start := time.Now()
	watch := stall.Start()
	defer watch.Stop()
	s.schedule()
	if err := s.setup(); err != nil {
		s.t.Fatalf("sim: setup: %v", err)
	}
	s.faultsOn.Store(true)
	bg, stopBG := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	bgWG.Add(3)
	go func() { defer bgWG.Done(); _ = s.reconciler.Run(bg) }()
	go func() { defer bgWG.Done(); _ = s.sweeper.Run(bg) }()
	go func() { defer bgWG.Done(); s.jumps(bg) }()

	var wg sync.WaitGroup
	deliveries := 0
	t0 := time.Now()
	for _, r := range s.requests {
		for _, pl := range r.plans {
			deliveries++
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.sleep(time.Until(t0.Add(pl.at)))
				s.deliver(r, pl, false)
			}()
		}
	}
	// Wait for every delivery but the dead ones.
	waitLive := func() {
		for {
			s.callsMu.Lock()
			n := len(s.calls)
			calls := append([]*call(nil), s.calls...)
			s.callsMu.Unlock()
			for _, c := range calls {
				select {
				case <-c.done:
				case <-c.deadCh:
				}
			}
			if n == deliveries {
				return
			}
			s.sleep(s.cfg.Lease / 4)
		}
	}
	waitLive()

	// End phase: faults off, leases expire, reconcile, retry every
	// identity once, reconcile again.
	s.faultsOn.Store(false)
	s.down.setLag(0)
	stopBG()
	bgWG.Wait()
	s.sleep(2*s.cfg.Lease + 50*time.Millisecond)
	s.quiesce()
	// Every client retries once more, as at-least-once delivery does:
	// one final retry per identity and payload.
	type idReq struct {
		id  runtime.Identity
		req Req
	}
	seen := map[idReq]bool{}
	var drain []*request
	for _, r := range s.requests {
		if k := (idReq{s.identity(r), r.req}); !seen[k] {
			seen[k] = true
			drain = append(drain, r)
		}
	}
	sem := make(chan struct{}, 8)
	var dwg sync.WaitGroup
	for _, r := range drain {
		dwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer dwg.Done()
			defer func() { <-sem }()
			s.deliver(r, plan{worker: 0}, true)
		}()
	}
	dwg.Wait()
	s.sleep(s.cfg.Lease)
	s.quiesce()

	s.mu.Lock()
	s.stall = watch.Stop()
	s.mu.Unlock()
	rep := s.check()
	close(s.teardown)
	wg.Wait()
	rep.Deliveries = deliveries + len(drain)
	rep.Elapsed = time.Since(start)
	return rep
}

// quiesce runs the reconciler until two passes in a row acquire nothing.
func (s *sim) quiesce() {
	idle := 0
	for range 60 {
		st, err := s.reconciler.RunOnce(context.Background())
		if err == nil && st.Acquired == 0 {
			if idle++; idle >= 2 {
				return
			}
		} else {
			idle = 0
		}
		s.sleep(s.cfg.Lease/2 + 10*time.Millisecond)
	}
}
