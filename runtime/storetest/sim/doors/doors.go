package doors

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/internal/stall"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/storetest/sim"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// The doors a run can drive.
const (
	// DoorDo calls runtime.Do.
	DoorDo = "do"
	// DoorGenerated calls the idemgen wrapper of internal/simpay.
	DoorGenerated = "generated"
	// DoorHTTP sends requests to idemhttp behind a loopback http.Server.
	DoorHTTP = "http"
	// DoorGRPC calls idemgrpc over a loopback grpc server.
	DoorGRPC = "grpc"
	// DoorTx runs pgstore.DoTx in concurrent caller transactions
	// (PostgreSQL only: Config.Pool).
	DoorTx = "dotx"
)

// Doors returns the doors a store can open: all but DoorTx, and DoorTx too
// when tx is true (the store is PostgreSQL).
//
// Runs of different doors may share a store concurrently, but not two runs
// of DoorGenerated: the generated wrapper's operation names are fixed, so
// one run's reconciler would acquire the other's records (reconcilers
// select records by operation, not by scope).
func Doors(tx bool) []string {
	d := []string{DoorDo, DoorGenerated, DoorHTTP, DoorGRPC}
	if tx {
		d = append(d, DoorTx)
	}
	return d
}

// TrailVar, when set, makes a run log the events of every identity whose
// name contains its value ("all": every identity), violations or not.
const TrailVar = "IDEM_DOORS_TRAIL"

// Config describes one run of one door.
type Config struct {
	// Name labels the run ("memstore", "pgstore-group", ...).
	Name string
	// Store is the store under test; runs isolate themselves by a scope of
	// their own.
	Store runtime.Store
	// Seed fixes the schedule (required: see sim.Runs).
	Seed uint64
	// Requests is the number of client requests (default 40); each is
	// delivered one to three times.
	Requests int
	// Lease is the runtimes' lease (default 600ms); the TTL is long enough
	// that no record expires during a run.
	Lease time.Duration
	// RecordLimit is the store's record limit (default 1024): large
	// responses, failure messages and error statuses are made bigger than
	// it. EnforceRecordLimit makes the wrapper refuse larger records with
	// runtime.ErrTooLarge, for stores without a limit (memstore).
	RecordLimit        int
	EnforceRecordLimit bool
	// NoStallExcuses reports every breach, even those a measured stall
	// explains (see [Run]): for a negative control, a store that is wrong
	// on purpose.
	NoStallExcuses bool
	// Pool, for DoorTx: the database of Store, a *pgstore.Store.
	Pool *pgxpool.Pool
	// Background, when not nil, runs during the deliveries (until ctx is
	// done): a fault of the store's own, such as poisoned group-commit
	// batches.
	Background func(ctx context.Context)
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "store"
	}
	if c.Requests <= 0 {
		c.Requests = 40
	}
	if n, err := strconv.Atoi(os.Getenv("IDEM_SIM_SCALE")); err == nil && n > 1 {
		c.Requests *= n
	}
	if c.Lease <= 0 {
		c.Lease = 600 * time.Millisecond
	}
	if c.RecordLimit <= 0 {
		c.RecordLimit = 1024
	}
	return c
}

// Report is what a run explored and found.
type Report struct {
	Door, Name string
	Seed       uint64
	Requests   int
	Deliveries int
	Effects    int
	// Modes counts deliveries by handler behaviour, Answers the clients'
	// answers by kind, Faults the injected store faults by kind.
	Modes, Answers, Faults map[string]int
	Violations             []Violation
	// Excused are violations that a measured stall of the whole process
	// explains (see [Run]): reported, never counted as failures.
	Excused []Violation
	// Stall is the longest the scheduler was late waking a sleeping
	// goroutine during the run (internal/stall).
	Stall   time.Duration
	Elapsed time.Duration
}

// Summary is the one-line summary a run logs (bench/soak.sh reads it).
func (r Report) Summary() string {
	faults := 0
	for _, n := range r.Faults {
		faults += n
	}
	return fmt.Sprintf("sim-summary name=%s/%s seed=%d requests=%d deliveries=%d store_ops=0 faults=%d effects=%d window=0 stale=0 linearizable_checked=0 skipped=0 undecided=0 violations=%d elapsed=%s",
		r.Name, r.Door, r.Seed, r.Requests, r.Deliveries, faults, r.Effects, len(r.Violations), r.Elapsed.Round(time.Millisecond))
}

// Violation is one broken invariant at one identity.
type Violation struct {
	Invariant string
	Identity  string
	Detail    string
	Events    []string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s: %s", v.Invariant, v.Identity, v.Detail)
	if len(v.Events) > 0 {
		b.WriteString("\n  events:\n")
		ev := v.Events
		if len(ev) > 30 {
			ev = ev[len(ev)-30:]
			b.WriteString("    ...\n")
		}
		for _, e := range ev {
			b.WriteString("    " + e + "\n")
		}
	}
	return b.String()
}

// mode is what the handler does on one delivery.
type mode int

const (
	mOK            mode = iota
	mSlow               // lasts ~0.6 lease before it applies: duplicates wait on it
	mSlowRenew          // lasts 1.3 leases; its lease renewals are slow, fail or time out
	mPermanent          // declines, nothing applied; the failure is larger than the record limit
	mWrapped            // applied, then the reply times out: the error wrapped one of six ways
	mTimeoutBefore      // times out before the downstream, nothing applied: the error in one of the six shapes
	mLostReply          // gRPC: applied and answered, the answer lost in transport (Unavailable)
)

var modeNames = [...]string{"ok", "slow", "slow-renewals", "permanent-large", "applied-then-wrapped-timeout", "timeout-before", "reply-lost-in-transport"}

func (m mode) String() string { return modeNames[m] }

// The six shapes of a handler's timeout or cancellation error.
var wrappedNames = [...]string{"fmt.Errorf %w DeadlineExceeded", "*url.Error timeout", "fmt.Errorf %w Canceled", "gRPC DeadlineExceeded status", "gRPC Canceled status", "errors.Join with DeadlineExceeded"}

// The three kinds of renewal fault.
var renewNames = [...]string{"slow renewals (lease/3, then answered)", "failing renewals", "renewals timing out after lease/3"}

// plan is one delivery of a request.
type plan struct {
	at       time.Duration
	mode     mode
	variant  int           // wrapped error shape, renewal fault kind
	deadline time.Duration // the caller's deadline (0: none)
	worker   int
	// tx: what the DoTx caller does with its transaction afterwards.
	tx txEnd
	// inTx: what else the DoTx caller does in its transaction with the
	// same identity before it ends it.
	inTx inTxCall
	// failSuccess: every SUCCESS write the delivery's call makes fails
	// (the store is unreachable for it), whether its effect or its query
	// found the outcome: it must still get the response, which the
	// runtime returns with ErrNotRecorded.
	failSuccess bool
	// failFailed: every FAILED write the delivery's call makes fails: the
	// failure is then not the call's answer (a duplicate may still run the
	// effect), and the caller must not be told it. (DoTx: a decline's
	// FAILED write waits on the record's row, which another session holds
	// until DoTx returns.)
	failFailed bool
}

type txEnd int

const (
	txCommit txEnd = iota
	txRollback
	txFailAfter // the caller's own work fails after DoTx: rollback, error
)

// inTxCall is a DoTx caller's second call of the same identity in its
// transaction, whose answer is the client's.
type inTxCall int

const (
	inTxOnce inTxCall = iota
	// inTxTwice: DoTx again after the first returned (a handler that
	// calls a helper that calls DoTx too): the second replays the first.
	inTxTwice
	// inTxSavepointRetry: the first DoTx inside a savepoint that the
	// caller rolls back, then DoTx again (a batch that retries an item).
	inTxSavepointRetry
)

var inTxNames = [...]string{"once", "twice", "savepoint-retry"}

func (c inTxCall) String() string { return inTxNames[c] }

type request struct {
	id     int
	tenant int // index in run.tenants: the scope the client calls in
	route  int // 0: the operation with a query (where the door has one), 1: without
	key    string
	req    simpay.Request
	plans  []plan
}

// kind is a client's answer, as the door's protocol expresses it.
type kind int

const (
	ansSuccess   kind = iota // the response, fresh or replayed
	ansNotStored             // "succeeded, but the response was not stored"
	ansFailed                // a failure answer: the effect did not happen
	ansLater                 // in progress, outcome unknown, retry: no claim
	ansDeadline              // the caller's own deadline or cancellation
	ansOutage                // "the store is unavailable"
	ansKeyReused
	ansOther
)

var kindNames = [...]string{"success", "succeeded-not-stored", "failed", "retry-later", "caller-deadline", "store-outage", "key-reused", "other"}

func (k kind) String() string { return kindNames[k] }

type answer struct {
	kind    kind
	receipt simpay.Receipt
	detail  string
}

// delivery is one call through the door.
type delivery struct {
	id    int
	req   *request
	plan  plan
	final bool
	ans   answer
	// storeFault: a store fault was injected on the delivery's identity
	// while it ran (an outage answer may then be honest).
	storeFault bool
	// errorLogs are the ERROR records the adapter logged for it.
	errorLogs []string
	// leaseLost: the adapter logged, or the runtime reported
	// (EventLeaseLost), that the delivery's lease was lost (another worker
	// took the record over).
	leaseLost bool
	// lateEffect: the delivery's effect reached the downstream after its
	// record was taken over (by a duplicate's claim or the reconciler)
	// while the handler ran (see takenOver): after a query asked at the
	// takeover, or beside the effect of the worker that took over.
	lateEffect bool
	// lostAfterEffect: the record was taken over after the delivery's
	// effect reached the downstream, its outcome never recorded (see
	// takenOver).
	lostAfterEffect bool
	// recorded: the runtime reported the outcome of the delivery's call
	// recorded (EventSucceeded, EventFailed, EventUnknown, EventReleased).
	recorded bool
	// successFailed: a SUCCESS write of the delivery's call failed by
	// plan.failSuccess.
	successFailed bool
	// failedFailed: a FAILED write of the delivery's call failed by
	// plan.failFailed.
	failedFailed bool
	// notRecordedTimeout: the adapter logged that the delivery's effect
	// succeeded but its SUCCESS write timed out (no fault injected: the
	// process or the server stalled).
	notRecordedTimeout bool
	// lateStart: the adapter logged that the delivery's late start could
	// not be confirmed (lateStartText: the effect did not run, the claim
	// is left to its lease).
	lateStart  bool
	start, end time.Time
	// retryWait is set (by the DoTx door) when the second DoTx of a
	// savepoint retry was told ErrInProgress: when that call ran.
	retryWait [2]time.Time
	// firstLateStart: the first DoTx of a savepoint retry failed its late
	// start's confirmation (the effect did not run; the claim is left to
	// its lease).
	firstLateStart bool
}

// door is one entry point.
type door interface {
	// setup starts the door (servers, wrappers) on the run's runtimes.
	setup(r *run) error
	// ops are the operation names of routes 0 and 1, as stored.
	ops() [2]string
	// call delivers d and classifies the answer.
	call(ctx context.Context, d *delivery) answer
	// encodeSuccess encodes rc as the door's stored response, for
	// runtime.Resolve.
	encodeSuccess(rc simpay.Receipt) ([]byte, error)
	close()
}

type effectRec struct {
	receipt  simpay.Receipt
	delivery int
}

// run is one run of one door.
type run struct {
	t     testing.TB
	cfg   Config
	name  string
	seed  uint64
	scope string
	// tenants are the scopes clients call in (see [tenantNames]): one
	// key under two tenants is two identities, and the downstream's query
	// looks a charge up by the scope in its context, so a query that lost
	// its tenant (or got another's) answers "not happened" and the effect
	// runs twice, which the ledger shows.
	tenants []string
	door    door
	store   *faultStore

	workers    []*runtime.Runtime
	reconciler *runtime.Reconciler
	rrt        *runtime.Runtime

	requests []*request

	mu         sync.Mutex
	deliveries []*delivery
	byID       map[int]*delivery
	ledger     map[string][]effectRec // identity -> effects applied
	declined   map[string]bool        // identity -> the downstream declined it
	trail      map[string][]string
	faults     map[string]int
	modes      map[string]int
	renewing   map[runtime.Identity]*delivery // slow-renewal deliveries in their effect
	// versions: the version of each record as the last write through the
	// run's store left it (0: released), for the handlers' takeover check.
	versions map[runtime.Identity]int64
	// inHandler: the handlers running, by the identity the runtime gave
	// their call (see takenOver).
	inHandler map[runtime.Identity]map[*handlerRun]bool
	// identOf: the run's identity of each runtime identity a handler ran
	// for.
	identOf map[runtime.Identity]string
	learned [2]string       // the operations the adapter stored, by route
	faulted map[string]bool // identities with store faults in flight
	// failedAt: when a FAILED write of each identity was first applied
	// (by a delivery, a duplicate or the reconciler).
	failedAt   map[runtime.Identity]time.Time
	violations []Violation
	excused    []Violation
	// stall is the run's longest measured scheduler stall, set before
	// check.
	stall time.Duration
	// watch measures the stalls (set before the store is used): the
	// scheduler's lateness, and the unfaulted renewals' durations.
	watch *stall.Watch
	// unsettled: the identities whose record a final retry left
	// PROCESSING or UNKNOWN, with that state (the end phase reconciles
	// them once more).
	unsettled map[string]runtime.State
	n         atomic.Int64
	gaveUp    int
	t0        time.Time
}

// tenantNames: a short tenant, a long one and a third. The long one's
// scope is cut to runtime.MaxKeyLen bytes where the door takes the scope as
// the identity's (runtime.Do refuses a longer one); behind the HTTP and
// gRPC adapters it is longer, so that the identity keeps a fixed-size name
// of it while the handler, the query and the record keep it whole.
var tenantNames = [...]string{"acme", "tenant-with-a-long-name/" + strings.Repeat("0123456789abcdef", 20), "globex"}

func (r *run) ident(rq *request) string { return r.identIn(rq.tenant, rq.route, rq.key) }

func (r *run) identIn(tenant, route int, key string) string {
	return fmt.Sprintf("%s %s %s", tenantNames[tenant], r.door.ops()[route], key)
}

// tenantOf returns the tenant whose scope is scope.
func (r *run) tenantOf(scope string) (int, bool) {
	for i, s := range r.tenants {
		if s == scope {
			return i, true
		}
	}
	return 0, false
}

// idOf is rq's identity in the store (an adapter names a scope over
// runtime.MaxKeyLen bytes by idname.Fit).
func (r *run) idOf(rq *request) runtime.Identity {
	return runtime.Identity{Scope: idname.Fit(r.tenants[rq.tenant], runtime.MaxKeyLen), Operation: r.opOf(rq.route), Key: rq.key}
}

func (r *run) note(ident, format string, args ...any) {
	line := fmt.Sprintf("%7.3fs ", time.Since(r.t0).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.trail[ident] = append(r.trail[ident], line)
	r.mu.Unlock()
}

// excuse records what would be a violation but for a measured stall of
// the process (why says which); see [Run].
func (r *run) excuse(why, invariant, ident, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.excused = append(r.excused, Violation{Invariant: invariant, Identity: ident, Detail: fmt.Sprintf(format, args...) + "; excused: " + why,
		Events: slices.Clone(r.trail[ident])})
}

func (r *run) violate(invariant, ident, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, Violation{Invariant: invariant, Identity: ident, Detail: fmt.Sprintf(format, args...),
		Events: slices.Clone(r.trail[ident])})
}

// Run runs one door on cfg.Store and checks the invariants; each violation
// fails t with the seed.
//
// The run measures how late the scheduler wakes a sleeping goroutine
// (internal/stall). The answers the runtime documents for a process that
// does not run (the package doc lists them: a second effect after a lease
// lost, a write of the runtime's own that ran out of its time, a final
// retry's lease lost) are excused, and logged, only with such a stall
// measured, and never with Config.NoStallExcuses.
func Run(t testing.TB, doorName string, cfg Config) Report {
	t.Helper()
	cfg = cfg.withDefaults()
	if cfg.Store == nil {
		t.Fatal("doors: Config.Store is nil")
	}
	var d door
	switch doorName {
	case DoorDo:
		d = &doDoor{}
	case DoorGenerated:
		d = &genDoor{}
	case DoorHTTP:
		d = &httpDoor{}
	case DoorGRPC:
		d = &grpcDoor{}
	case DoorTx:
		if cfg.Pool == nil {
			t.Fatal("doors: DoorTx needs Config.Pool")
		}
		d = &txDoor{}
	default:
		t.Fatalf("doors: unknown door %q", doorName)
	}
	var b [4]byte
	_, _ = crand.Read(b[:])
	r := &run{t: t, cfg: cfg, name: doorName, seed: cfg.Seed, door: d,
		scope:  fmt.Sprintf("doors/%s/%s/%d-%s", cfg.Name, doorName, cfg.Seed, hex.EncodeToString(b[:])),
		byID:   map[int]*delivery{},
		ledger: map[string][]effectRec{}, trail: map[string][]string{}, faults: map[string]int{}, modes: map[string]int{},
		renewing: map[runtime.Identity]*delivery{}, inHandler: map[runtime.Identity]map[*handlerRun]bool{}, versions: map[runtime.Identity]int64{}, identOf: map[runtime.Identity]string{}, faulted: map[string]bool{}, declined: map[string]bool{},
		failedAt: map[runtime.Identity]time.Time{}}
	for _, name := range tenantNames {
		scope := r.scope + "/" + name
		if doorName != DoorHTTP && doorName != DoorGRPC {
			scope = scope[:min(len(scope), runtime.MaxKeyLen)]
		}
		r.tenants = append(r.tenants, scope)
	}
	t.Logf("doors %s/%s: seed %d (replay with IDEM_SIM_SEED=%d)", cfg.Name, doorName, cfg.Seed, cfg.Seed)
	rep := r.run()
	t.Log(rep.Summary())
	// The same shape as package sim's line, which bench/soak.sh reads.
	t.Logf("doors %s/%s seed %d: faults %v; outcomes %v; modes %v", cfg.Name, doorName, cfg.Seed, rep.Faults, rep.Answers, rep.Modes)
	for _, v := range rep.Excused {
		t.Logf("doors %s/%s seed %d: %s", cfg.Name, doorName, cfg.Seed, v)
	}
	if len(rep.Violations) > 0 {
		kinds := map[string]int{}
		for _, v := range rep.Violations {
			kinds[v.Invariant]++
		}
		t.Errorf("doors %s/%s seed %d: %d violations by invariant: %v (replay with IDEM_SIM_SEED=%d)", cfg.Name, doorName, cfg.Seed, len(rep.Violations), kinds, cfg.Seed)
	}
	if v := os.Getenv(TrailVar); v != "" {
		r.mu.Lock()
		for ident, tr := range r.trail {
			if strings.Contains(ident, v) || v == "all" {
				t.Logf("trail of %s:\n    %s", ident, strings.Join(tr, "\n    "))
			}
		}
		r.mu.Unlock()
	}
	shown := map[string]int{}
	for _, v := range rep.Violations {
		if shown[v.Invariant]++; shown[v.Invariant] > 2 {
			continue
		}
		t.Errorf("doors %s/%s seed %d: %s", cfg.Name, doorName, cfg.Seed, v)
	}
	return rep
}

// schedule draws the requests and their deliveries from the seed.
func (r *run) schedule() {
	rng := rand.New(rand.NewPCG(r.seed, 0xd005))
	lease := r.cfg.Lease
	keys := max(4, r.cfg.Requests/2)
	spread := 4 * lease * time.Duration(max(1, r.cfg.Requests/40))
	large := map[int]bool{}
	for k := range keys {
		large[k] = rng.IntN(100) < 12
	}
	grpc := r.name == DoorGRPC
	tx := r.name == DoorTx
	http := r.name == DoorHTTP
	// The SUCCESS-write faults draw from a stream of their own, so that
	// they leave the rest of a seed's schedule as it was. DoTx writes
	// SUCCESS in the caller's transaction, not through the store.
	frng := rand.New(rand.NewPCG(r.seed, 0xfa11))
	failSuccess := func() bool { return !tx && frng.IntN(100) < 8 }
	// The FAILED-write faults too, from a stream of their own.
	ffrng := rand.New(rand.NewPCG(r.seed, 0xfa12))
	// DoTx's FAILED write is the store's, not a wrapper's: the fault
	// holds the record's row from another session instead (see
	// txDoor.lockRow), and only a decline writes FAILED there.
	failFailed := func() bool {
		if tx {
			return ffrng.IntN(100) < 30
		}
		return ffrng.IntN(100) < 10
	}
	// So do DoTx's second calls in one transaction.
	irng := rand.New(rand.NewPCG(r.seed, 0x2ce11))
	inTx := func() inTxCall {
		if !tx {
			return inTxOnce
		}
		switch p := irng.IntN(100); {
		case p < 15:
			return inTxTwice
		case p < 35:
			return inTxSavepointRetry
		}
		return inTxOnce
	}
	drawMode := func() (mode, int) {
		for {
			p := rng.IntN(100)
			var m mode
			switch {
			case p < 30:
				m = mOK
			case p < 42:
				m = mSlow
			case p < 54:
				m = mSlowRenew
			case p < 70:
				m = mPermanent
			case p < 85:
				m = mWrapped
			case p < 93:
				m = mTimeoutBefore
			default:
				m = mLostReply
			}
			switch {
			case m == mLostReply && !grpc,
				tx && (m == mSlowRenew || m == mWrapped || m == mTimeoutBefore),
				http && m == mWrapped:
				continue
			}
			v := 0
			switch m {
			case mWrapped, mTimeoutBefore:
				v = rng.IntN(len(wrappedNames))
			case mSlowRenew:
				v = rng.IntN(len(renewNames))
			}
			return m, v
		}
	}
	for i := range r.cfg.Requests {
		k := rng.IntN(keys)
		route := rng.IntN(2)
		rq := &request{id: i, tenant: rng.IntN(len(tenantNames)), route: route, key: fmt.Sprintf("k%03d", k),
			req: simpay.Request{Amount: int64(100 + k), Large: large[k]}}
		rq.req.Key = rq.key
		if rng.IntN(100) < 4 {
			rq.req.Amount++ // the key reused with another payload
			rq.req.Large = false
		}
		at := time.Duration(rng.Int64N(int64(spread)))
		m, v := drawMode()
		first := plan{at: at, mode: m, variant: v, worker: rng.IntN(3), tx: txEnd(rng.IntN(3) / 2), failSuccess: failSuccess(), failFailed: failFailed(), inTx: inTx()}
		if tx && rng.IntN(100) < 15 {
			first.tx = txFailAfter
		}
		rq.plans = append(rq.plans, first)
		n := 1 + rng.IntN(3)
		// DoTx: a permanent failure always has a concurrent duplicate
		// (one that blocks on the claim row while the first is open).
		txDup := tx && m == mPermanent
		if txDup {
			n = max(n, 2)
		}
		for i := range n - 1 {
			pl := plan{worker: rng.IntN(3), tx: txEnd(rng.IntN(4) / 3), failSuccess: failSuccess(), failFailed: failFailed(), inTx: inTx()}
			pl.mode, pl.variant = drawMode()
			switch p := rng.IntN(100); {
			case p < 40 || i == 0 && txDup: // a concurrent duplicate, often with a short deadline
				pl.at = at + time.Duration(rng.Int64N(int64(lease/10)))
				if rng.IntN(2) == 0 {
					pl.deadline = lease/5 + time.Duration(rng.Int64N(int64(lease/5)))
				}
			case p < 75: // a retry just after the first lease would end
				pl.at = at + lease + lease/10 + time.Duration(rng.Int64N(int64(lease/5)))
			default: // a later retry
				pl.at = at + 2*lease + time.Duration(rng.Int64N(int64(2*lease)))
			}
			rq.plans = append(rq.plans, pl)
		}
		r.requests = append(r.requests, rq)
	}
}

// runtimeOptions are the workers' options: maxWait longer than the short
// caller deadlines, so that those expire while the duplicate waits.
func (r *run) runtimeOptions(owner string, policy runtime.ErrorPolicy) []runtime.Option {
	lease := r.cfg.Lease
	return []runtime.Option{
		runtime.WithOwner(owner), runtime.WithLease(lease), runtime.WithTTL(time.Hour),
		runtime.WithMaxWait(lease / 2), runtime.WithCompletionTimeout(2 * lease),
		runtime.WithQueryTimeout(lease), runtime.WithErrorPolicy(policy),
		runtime.WithObserver(runtime.ObserverFunc(r.observe)),
	}
}

// observe counts the reconciler's give-ups, and notes in the trail of a
// delivery what the runtime reports of its call (the phases but the
// query's left out). A lease the runtime reports lost marks the delivery:
// a door can answer such a call with its handler's own answer (idemgrpc
// does when the handler returned an error) and the adapter need not log
// it, yet a lost lease is what lets a stalled process's late effect run
// twice (see secondEffectExcused).
func (r *run) observe(ctx context.Context, e runtime.Event) {
	if e.Kind == runtime.EventReconcileGaveUp {
		r.mu.Lock()
		r.gaveUp++
		r.mu.Unlock()
	}
	d := r.deliveryByID(deliveryIn(ctx))
	if d == nil || e.Kind == runtime.EventPhase && e.Phase != runtime.PhaseQuery {
		return
	}
	what := e.Kind.String()
	if e.Kind == runtime.EventPhase {
		what = fmt.Sprintf("query asked (%v)", e.Duration.Round(time.Millisecond))
	}
	if e.State != "" {
		what += " " + string(e.State)
	}
	if e.Err != nil {
		what += ": " + short(e.Err.Error())
	}
	r.note(r.ident(d.req), "runtime, delivery %d: %s", d.id, what)
	switch e.Kind {
	case runtime.EventLeaseLost:
		r.mu.Lock()
		d.leaseLost = true
		r.mu.Unlock()
	case runtime.EventSucceeded, runtime.EventFailed, runtime.EventUnknown, runtime.EventReleased:
		r.mu.Lock()
		d.recorded = true
		r.mu.Unlock()
	}
}

// deliveryIn is the id of the delivery a context of the runtime's or an
// adapter's belongs to: the deliveryKey set by deliver or the HTTP door's
// server, or the gRPC door's incoming metadata; -1 for none (the
// reconciler's).
func deliveryIn(ctx context.Context) int {
	if id, ok := ctx.Value(deliveryKey{}).(int); ok {
		return id
	}
	return deliveryOf(ctx)
}

func (r *run) setup() error {
	var base runtime.Store = r.cfg.Store
	if r.cfg.EnforceRecordLimit {
		base = sim.LimitStore{Store: base, Limit: r.cfg.RecordLimit}
	}
	r.store = &faultStore{Store: base, r: r}
	policies := []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.RecordFailed, runtime.ReleaseRecord}
	for i, p := range policies {
		rt, err := runtime.New(r.store, r.runtimeOptions(fmt.Sprintf("%s/w%d", r.scope, i), p)...)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, rt)
	}
	rrt, err := runtime.New(r.store, r.runtimeOptions(r.scope+"/r", runtime.RecordUnknown)...)
	if err != nil {
		return err
	}
	r.rrt = rrt
	if err := r.door.setup(r); err != nil {
		return err
	}
	r.reconciler, err = runtime.NewReconciler(rrt, runtime.ReconcileInterval(r.cfg.Lease/4), runtime.ReconcileLease(r.cfg.Lease),
		runtime.ReconcileMaxAttempts(3), runtime.ReconcileBackoff(r.cfg.Lease/10, r.cfg.Lease/2), runtime.ReconcileBatch(16))
	return err
}

// errDeclined is the downstream's permanent refusal.
var errDeclined = errors.New("downstream declined")

// failurePage is a gateway's HTML error page: under 4 KiB, but JSON escapes
// each <, > and & to six bytes, so its encoding is far over a 1 KiB limit.
func failurePage() string {
	var b strings.Builder
	b.WriteString("<html><head><title>402 Payment Required</title></head><body>")
	for b.Len() < 3500 {
		b.WriteString("<p>card declined &amp; not charged</p>")
	}
	b.WriteString("</body></html>")
	return b.String()
}

// handle is every door's handler: it acts as the delivery's plan says and
// records what the downstream applied. It returns the receipt or one of
// errDeclined (wrapped, with a large message), a timeout or cancellation
// error in one of six shapes, or the context's error.
func (r *run) handle(ctx context.Context, route int, dID int, req simpay.Request) (simpay.Receipt, error) {
	d := r.deliveryByID(dID)
	if d == nil {
		return simpay.Receipt{}, fmt.Errorf("doors: no delivery %d", dID)
	}
	ident := r.ident(d.req)
	m := d.plan.mode
	r.note(ident, "handler runs for delivery %d (%s)", d.id, m)
	id := runtime.Identity{Scope: idname.Fit(r.tenants[d.req.tenant], runtime.MaxKeyLen), Operation: r.door.ops()[route], Key: req.Key}
	a, attempt := runtime.AttemptFrom(ctx)
	if attempt {
		id = a.ID
		r.learn(route, a.ID.Operation)
	}
	hr := &handlerRun{d: d}
	r.mu.Lock()
	r.identOf[id] = ident
	if r.inHandler[id] == nil {
		r.inHandler[id] = map[*handlerRun]bool{}
	}
	r.inHandler[id][hr] = true
	r.mu.Unlock()
	// A takeover before the handler started (the process stalled between
	// the claim's last confirmation and the handler): the record no longer
	// is at the attempt's version, as a fencing downstream would see.
	// Takeovers from now on are noted by takenOver. (Only for a call on
	// this run's store: the HTTP door's outer placement is on a memory
	// store of its own.)
	// (The version is the last one a write through this run's store
	// returned: no store round trip in the handler, which would stretch
	// it under load.)
	if _, onStore := r.rrt.Running(ctx); attempt && onStore {
		r.mu.Lock()
		v, known := r.versions[id]
		if known && v != a.FencingToken {
			hr.takenOver = true
		}
		r.mu.Unlock()
		if known && v != a.FencingToken {
			r.note(ident, "store: delivery %d's handler starts at version %d, but the record is gone or at version %d: taken over", d.id, a.FencingToken, v)
		}
	}
	defer func() {
		r.mu.Lock()
		delete(r.inHandler[id], hr)
		r.mu.Unlock()
	}()
	apply := func() simpay.Receipt {
		r.mu.Lock()
		defer r.mu.Unlock()
		rc := simpay.Receipt{ID: fmt.Sprintf("rc_%d", r.n.Add(1)), Identity: ident, Amount: req.Amount}
		if req.Large {
			rc.Pad = strings.Repeat("x", r.cfg.RecordLimit+256)
		}
		r.ledger[ident] = append(r.ledger[ident], effectRec{receipt: rc, delivery: d.id})
		late := ""
		if hr.takenOver {
			d.lateEffect = true
			late = " (late: its record was taken over while the handler ran)"
		}
		r.trail[ident] = append(r.trail[ident], fmt.Sprintf("%7.3fs downstream applies %s for delivery %d%s", time.Since(r.t0).Seconds(), rc.ID, d.id, late))
		return rc
	}
	switch m {
	case mSlow:
		if err := sleepCtx(ctx, r.cfg.Lease*6/10); err != nil {
			r.note(ident, "delivery %d: effect stopped before the downstream: %v", d.id, err)
			return simpay.Receipt{}, err
		}
	case mSlowRenew:
		r.mu.Lock()
		r.renewing[id] = d
		r.mu.Unlock()
		err := sleepCtx(ctx, r.cfg.Lease*13/10)
		r.mu.Lock()
		delete(r.renewing, id)
		r.mu.Unlock()
		if err != nil {
			r.note(ident, "delivery %d: effect stopped before the downstream: %v (cause %v)", d.id, err, context.Cause(ctx))
			return simpay.Receipt{}, err
		}
	case mPermanent:
		r.note(ident, "delivery %d: the downstream declines", d.id)
		r.mu.Lock()
		r.declined[ident] = true
		r.mu.Unlock()
		return simpay.Receipt{}, runtime.Permanent(fmt.Errorf("%w: %s", errDeclined, failurePage()))
	case mTimeoutBefore:
		return simpay.Receipt{}, wrappedErr(d.plan.variant)
	case mWrapped:
		rc := apply()
		_ = rc
		r.note(ident, "delivery %d: the reply is lost: %s", d.id, wrappedNames[d.plan.variant])
		return simpay.Receipt{}, wrappedErr(d.plan.variant)
	}
	if err := ctx.Err(); err != nil {
		return simpay.Receipt{}, err
	}
	return apply(), nil
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

func (r *run) deliveryByID(id int) *delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

func (r *run) deliver(rq *request, pl plan, final bool) *delivery {
	r.mu.Lock()
	d := &delivery{id: len(r.deliveries), req: rq, plan: pl, final: final}
	r.deliveries = append(r.deliveries, d)
	r.byID[d.id] = d
	if !final {
		r.modes[pl.mode.String()]++
		if pl.inTx != inTxOnce {
			r.modes["dotx-"+pl.inTx.String()]++
		}
	}
	r.mu.Unlock()
	ident := r.ident(rq)
	desc := pl.mode.String()
	switch pl.mode {
	case mWrapped, mTimeoutBefore:
		desc += " (" + wrappedNames[pl.variant] + ")"
	case mSlowRenew:
		desc += " (" + renewNames[pl.variant] + ")"
	}
	if pl.failSuccess {
		desc += ", its SUCCESS writes fail"
	}
	if pl.failFailed {
		desc += ", its FAILED writes fail"
	}
	r.note(ident, "delivery %d starts: request %d (amount %d, large %v) on w%d, %s, deadline %v, final %v", d.id, rq.id, rq.req.Amount, rq.req.Large, pl.worker, desc, pl.deadline, final)
	ctx := runtime.WithScope(context.WithValue(context.Background(), deliveryKey{}, d.id), r.tenants[rq.tenant])
	cancel := context.CancelFunc(func() {})
	if pl.deadline > 0 {
		ctx, cancel = context.WithTimeout(ctx, pl.deadline)
	}
	d.start = time.Now()
	ans := r.door.call(ctx, d)
	cancel()
	r.mu.Lock()
	d.end = time.Now() // under mu: takenOver reads it
	d.ans = ans
	d.storeFault = d.storeFault || r.faulted[ident]
	r.mu.Unlock()
	r.note(ident, "delivery %d answered %s %s %s", d.id, ans.kind, ans.receipt.ID, short(ans.detail))
	return d
}

func short(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}

func (r *run) run() Report {
	start := time.Now()
	r.t0 = start
	watch := stall.Start()
	defer watch.Stop()
	r.watch = watch
	r.schedule()
	if err := r.setup(); err != nil {
		r.t.Fatalf("doors: setup: %v", err)
	}
	defer r.door.close()
	bg, stop := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() { defer bgWG.Done(); _ = r.reconciler.Run(bg) }()
	if r.cfg.Background != nil {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); r.cfg.Background(bg) }()
	}
	var wg sync.WaitGroup
	n := 0
	for _, rq := range r.requests {
		for _, pl := range rq.plans {
			n++
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(start.Add(pl.at)))
				r.deliver(rq, pl, false)
			}()
		}
	}
	wg.Wait()
	stop()
	bgWG.Wait()
	// End: leases expire, the reconciler converges what it can, an
	// operator resolves what is left to what the downstream knows, and
	// every identity is retried once by a healthy client.
	time.Sleep(r.cfg.Lease + r.cfg.Lease/5)
	r.quiesce()
	r.resolveLeft()
	seen := map[string]bool{}
	var finals []*request
	for _, rq := range r.requests {
		id := r.ident(rq)
		if !seen[id] {
			seen[id] = true
			finals = append(finals, rq)
		}
	}
	for _, rq := range finals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A healthy client retries an answer that says the effect did
			// not start because its late start could not be confirmed
			// (a loaded machine: the claim is left to its lease, as
			// documented), once that lease has passed; at most twice.
			// The HTTP door answers it 503 store-unavailable, which a
			// client retries too, and says why in its log only (series at
			// 9e69a4d, run 1, load 17: the record was still PROCESSING
			// at the end).
			for try := 0; ; try++ {
				d := r.deliver(rq, plan{worker: 0}, true)
				r.mu.Lock()
				late := (d.ans.kind == ansLater && strings.Contains(d.ans.detail, lateStartText)) ||
					(d.ans.kind == ansOutage && d.lateStart)
				r.mu.Unlock()
				if try == 2 || !late {
					break
				}
				time.Sleep(r.cfg.Lease + r.cfg.Lease/5)
			}
		}()
	}
	wg.Wait()
	// A final retry that lost its lease (the lease rule stops a handler
	// whose renewals could not be answered in time, on a loaded machine)
	// ends UNKNOWN, which is not final: the reconciler converges it, and
	// the operator resolves what it gives up on. Those records are noted
	// (check reports them unless a stall explains them) and converged.
	r.unsettled = map[string]runtime.State{}
	for _, rq := range finals {
		rec, err := r.cfg.Store.Get(context.Background(), r.idOf(rq))
		if err == nil && (rec.State == runtime.StateProcessing || rec.State == runtime.StateUnknown) {
			r.unsettled[r.ident(rq)] = rec.State
		}
	}
	if len(r.unsettled) > 0 {
		time.Sleep(r.cfg.Lease + r.cfg.Lease/5)
		r.quiesce()
		r.resolveLeft()
	}
	if l, ok := r.door.(interface{ loadLedger() error }); ok {
		if err := l.loadLedger(); err != nil {
			r.t.Fatalf("doors: reading the effects: %v", err)
		}
	}
	if a, b := r.opOf(0), r.opOf(1); a == b {
		r.violate("no client gets another identity's response", r.identIn(0, 1, "*"), "two routes are stored under one operation %q: their keys collide", a)
	}
	r.stall = watch.Stop()
	r.check()
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{Door: r.name, Name: r.cfg.Name, Seed: r.seed, Requests: len(r.requests), Deliveries: len(r.deliveries),
		Modes: r.modes, Answers: map[string]int{}, Faults: r.faults, Violations: r.violations, Excused: r.excused,
		Stall: r.stall, Elapsed: time.Since(start)}
	for _, d := range r.deliveries {
		rep.Answers[d.ans.kind.String()]++
	}
	for _, e := range r.ledger {
		rep.Effects += len(e)
	}
	sort.Slice(rep.Violations, func(i, j int) bool { return rep.Violations[i].Invariant < rep.Violations[j].Invariant })
	return rep
}

// quiesce runs the reconciler until a pass acquires nothing.
func (r *run) quiesce() {
	for range 20 {
		st, err := r.reconciler.RunOnce(context.Background())
		if err == nil && st.Acquired == 0 {
			return
		}
		time.Sleep(r.cfg.Lease / 4)
	}
}

// resolveLeft is the operator: every record still UNKNOWN, or PROCESSING
// with its lease expired, is resolved by hand to what the downstream knows
// (SUCCESS with the effect's response, or FAILED with a large HTML message).
func (r *run) resolveLeft() {
	seen := map[string]bool{}
	for _, rq := range r.requests {
		ident := r.ident(rq)
		if seen[ident] {
			continue
		}
		seen[ident] = true
		id := r.idOf(rq)
		rec, err := r.cfg.Store.Get(context.Background(), id)
		if err != nil || rec.State == runtime.StateSuccess || rec.State == runtime.StateFailed {
			continue
		}
		if rec.State == runtime.StateProcessing && rec.LeaseLive() {
			continue
		}
		r.mu.Lock()
		effs := slices.Clone(r.ledger[ident])
		r.mu.Unlock()
		res := runtime.Resolution{ID: id, Reason: "the downstream's ledger says so", Owner: "doors-operator", TTL: time.Hour, Version: rec.Version}
		if len(effs) > 0 {
			rc := effs[len(effs)-1].receipt
			b, err := r.door.encodeSuccess(rc)
			if err != nil {
				r.violate("converges or is reported", ident, "encoding a resolution: %v", err)
				continue
			}
			res.To, res.Response = runtime.ResolveSuccess, b
		} else {
			res.To, res.Failure = runtime.ResolveFailed, runtime.Permanent(fmt.Errorf("%w (resolved): %s", errDeclined, failurePage()))
		}
		out, err := runtime.Resolve(context.Background(), r.cfg.Store, res)
		r.note(ident, "operator resolves the %s record to %s: %v %v", rec.State, res.To, out.State, err)
		if err != nil && !errors.Is(err, runtime.ErrNotResolvable) {
			r.violate("every outcome is recorded whatever its size", ident, "runtime.Resolve to %s: %v", res.To, err)
		}
	}
}

// secondEffectExcused reports whether effects applied for one identity
// behind door are what the runtime documents for a process that stalled
// for stall with lost leases lost. The lease rule stops an effect a tenth
// of the lease before its lease could expire; a process that does not run
// for longer than that (a loaded machine) can apply an effect after its
// lease ended: behind a door without a query the worker that took over
// runs it again, and behind one with a query the query may have been
// asked before the late effect reached the downstream. That is the limit
// fencing tokens cover. Only then, and one extra run per lease lost, is a
// second effect excused: a lease counts as lost when the runtime told its
// call so, or when the call's effect reached the downstream after its
// record was taken over (delivery.lateEffect). DoTx's effect commits with its record (a late
// one's transaction cannot commit): never excused.
func secondEffectExcused(door string, stall, lease time.Duration, effects, lost int) bool {
	switch door {
	case DoorHTTP, DoorGRPC, DoorDo, DoorGenerated:
		return stall >= lease/10 && effects <= 1+lost
	}
	return false
}

// lateStartText is what the runtime says when it could not confirm, before
// the effect, a lease granted so long ago that it may have expired: the
// effect did not run.
const lateStartText = "the lease may have expired before the effect could start and renewing it failed"

// unrecordedTexts are what the runtime says when a write of the call's own
// timed out (its deadline ran out): the late start's renewal, the FAILED
// and UNKNOWN writes of an effect's failure, and the writes of a takeover's
// query's answer (PROCESSING for "not happened", SUCCESS, FAILED, UNKNOWN).
var unrecordedTexts = []string{lateStartText, "but recording it failed", "recording the outcome failed",
	": recording PROCESSING: ", ": recording SUCCESS: ", ": recording FAILED: ", ": recording UNKNOWN: "}

// stalledWrite reports whether d's store-failure answer or ERROR logs are
// all a write of the runtime's own timing out (see unrecordedTexts), in a
// run whose process stalled past a third of the lease (the late start's
// renewal's timeout, and a good part of the completion timeout): the
// runtime's own deadline ran out while the process did not run, not the
// store.
func (r *run) stalledWrite(d *delivery) bool {
	if r.stall < r.cfg.Lease/3 {
		return false
	}
	texts := d.errorLogs
	if len(texts) == 0 {
		texts = []string{d.ans.detail}
	}
	for _, t := range texts {
		known := false
		for _, u := range unrecordedTexts {
			known = known || strings.Contains(t, u)
		}
		if !known || !strings.Contains(t, context.DeadlineExceeded.Error()) {
			return false
		}
	}
	return true
}

// notRecordedTimeout reports whether text says that a call's effect
// succeeded and its SUCCESS write timed out (runtime.ErrNotRecorded, with
// the deadline's error).
func notRecordedTimeout(text string) bool {
	return strings.Contains(text, runtime.ErrNotRecorded.Error()) && strings.Contains(text, context.DeadlineExceeded.Error())
}

// check verifies the invariants per identity once the run is over.
func (r *run) check() {
	r.mu.Lock()
	deliveries := slices.Clone(r.deliveries)
	ledger := map[string][]effectRec{}
	for k, v := range r.ledger {
		ledger[k] = slices.Clone(v)
	}
	declined := maps.Clone(r.declined)
	r.mu.Unlock()
	hasQuery := r.name != DoorTx // route 0 has a query on every door but DoTx's
	byIdent := map[string][]*delivery{}
	var order []string
	for _, d := range deliveries {
		id := r.ident(d.req)
		if byIdent[id] == nil {
			order = append(order, id)
		}
		byIdent[id] = append(byIdent[id], d)
	}
	for _, ident := range order {
		r.checkOwnWait(byIdent[ident])
		effs := ledger[ident]
		// The at-least-once window of an operation without a query: an
		// effect whose SUCCESS write failed (injected) leaves the claim
		// PROCESSING, and the duplicate that takes it over once its lease
		// ends runs the effect again, as ErrNotRecorded's doc says; what
		// that run returns is the outcome (a decline is then recorded
		// FAILED although the first run was applied, and an HTTP 402,
		// a response the adapter records as SUCCESS, is followed by an
		// applied run). With a query, the duplicate asks it instead: never
		// excused.
		// A SUCCESS write that timed out while the process stalled opens
		// the same window (the runtime returns ErrNotRecorded alike).
		// So does, in a run that stalled past the lease rule's margin, a
		// takeover after an effect whose outcome was never recorded
		// (delivery.lostAfterEffect), or an effect that reached the
		// downstream after its record was taken over (lateEffect).
		windowed, timedOut, lostAfter := 0, 0, 0
		if len(effs) > 0 && (!hasQuery || byIdent[ident][0].req.route != 0) {
			for _, d := range byIdent[ident] {
				switch {
				case d.successFailed:
					windowed++
				case !r.cfg.NoStallExcuses && r.stall >= r.cfg.Lease/3 && (d.notRecordedTimeout || notRecordedTimeout(d.ans.detail)):
					windowed++
					timedOut++
				case !r.cfg.NoStallExcuses && r.stall >= r.cfg.Lease/10 && (d.lostAfterEffect || d.lateEffect):
					windowed++
					lostAfter++
				}
			}
		}
		window := fmt.Sprintf("the at-least-once window of an operation without a query: %d SUCCESS write(s) failed by injection", windowed-timedOut-lostAfter)
		if timedOut > 0 {
			window += fmt.Sprintf(", %d timed out in a stall of %v", timedOut, r.stall)
		}
		if lostAfter > 0 {
			window += fmt.Sprintf(", %d call(s) taken over around their effect in a stall of %v", lostAfter, r.stall)
		}
		// stallWhy: a second effect was excused by a measured stall and the
		// leases lost in it (secondEffectExcused); "" when not.
		stallWhy := ""
		if len(effs) > 1 {
			var ds []string
			lost := 0
			for _, e := range effs {
				ds = append(ds, fmt.Sprintf("%s by delivery %d", e.receipt.ID, e.delivery))
			}
			for _, d := range byIdent[ident] {
				if d.leaseLost || d.lateEffect || strings.Contains(d.ans.detail, runtime.ErrLeaseLost.Error()) {
					lost++
				}
			}
			if len(effs) <= 1+windowed {
				r.excuse(window, "at-most-once", ident, "the downstream applied the effect %d times: %s", len(effs), strings.Join(ds, ", "))
			} else if !r.cfg.NoStallExcuses && secondEffectExcused(r.name, r.stall, r.cfg.Lease, len(effs)-windowed, lost) {
				stallWhy = fmt.Sprintf("a stall of %v (the lease rule's margin is %v) and %d lease(s) lost", r.stall, r.cfg.Lease/10, lost)
				r.excuse(stallWhy, "at-most-once", ident, "the downstream applied the effect %d times: %s", len(effs), strings.Join(ds, ", "))
			} else {
				r.violate("at-most-once", ident, "the downstream applied the effect %d times: %s", len(effs), strings.Join(ds, ", "))
			}
		}
		applied := func(id string) bool {
			for _, e := range effs {
				if e.receipt.ID == id {
					return true
				}
			}
			return false
		}
		var final *delivery
		for _, d := range byIdent[ident] {
			a := d.ans
			if d.final {
				final = d
			}
			switch a.kind {
			case ansSuccess:
				if a.receipt.Identity != ident {
					r.violate("no client gets another identity's response", ident, "delivery %d was answered %s of %q", d.id, a.receipt.ID, a.receipt.Identity)
				} else if !applied(a.receipt.ID) {
					r.violate("no success for a failure", ident, "delivery %d was told success (%s) but the downstream applied %v", d.id, a.receipt.ID, receipts(effs))
				}
			case ansNotStored:
				if len(effs) == 0 && r.name != DoorHTTP {
					r.violate("no success for a failure", ident, "delivery %d was told the call succeeded (response not stored: %s) but the downstream applied nothing", d.id, short(a.detail))
				}
			case ansFailed:
				if at, ok := r.failedAt[r.idOf(d.req)]; d.failedFailed && (!ok || at.After(d.end)) {
					// (Its answer may be a replay of the FAILED another
					// call recorded meanwhile: a retry of the adapter's,
					// after the reconciler converged the record.)
					r.violate("a failure is an answer only once recorded", ident, "delivery %d's FAILED writes failed (the store was unreachable for them), and it was told the call failed: %s", d.id, short(a.detail))
				}
				if len(effs) > 0 && d.req.req.Amount == effsAmount(effs) && windowed > 0 {
					r.excuse(window, "no failure for a success", ident, "delivery %d was told the call failed (%s) but the downstream applied %v", d.id, short(a.detail), receipts(effs))
				} else if len(effs) > 0 && d.req.req.Amount == effsAmount(effs) {
					r.violate("no failure for a success", ident, "delivery %d was told the call failed (%s) but the downstream applied %v", d.id, short(a.detail), receipts(effs))
				}
			}
			if len(d.errorLogs) > 0 && !d.storeFault && !r.cfg.NoStallExcuses && r.stalledWrite(d) {
				r.excuse(fmt.Sprintf("a stall of %v, past a third of the lease (%v), and a write of the runtime's timed out", r.stall, r.cfg.Lease/3),
					"no ERROR log while the store is healthy", ident, "the adapter logged at ERROR for delivery %d (%s, deadline %v): %s", d.id, d.plan.mode, d.plan.deadline, short(d.errorLogs[0]))
			} else if len(d.errorLogs) > 0 && !d.storeFault {
				r.violate("no ERROR log while the store is healthy", ident, "the adapter logged at ERROR for delivery %d (%s, deadline %v): %s", d.id, d.plan.mode, d.plan.deadline, short(d.errorLogs[0]))
			}
			// The response a delivery's own call produced (its handler's, or
			// the one its query found) is its answer, recorded or not: a
			// success, or the handler's own failure answer where the door
			// records that as a response (an HTTP 402). (A gRPC answer lost
			// in transport on purpose is retried by grpc: the retry finds
			// the claim in flight.) A call that took over an earlier
			// delivery's declined request finds the decline by its query:
			// the decline is that call's response, whatever its own plan.
			gotResponse := a.kind == ansSuccess || a.kind == ansDeadline || a.kind == ansFailed && d.plan.mode == mPermanent ||
				a.kind == ansFailed && declined[ident] || d.plan.mode == mLostReply
			if d.successFailed && !gotResponse && !d.leaseLost && !strings.Contains(a.detail, runtime.ErrLeaseLost.Error()) {
				r.violate("the response when only the SUCCESS write fails", ident, "delivery %d's SUCCESS writes failed (the store was unreachable for them), and it was told %s, not the response: %s", d.id, a.kind, short(a.detail))
			}
			switch a.kind {
			case ansOutage:
				if !d.storeFault && !r.cfg.NoStallExcuses && r.stalledWrite(d) {
					r.excuse(fmt.Sprintf("a stall of %v, past a third of the lease (%v), and a write of the runtime's timed out", r.stall, r.cfg.Lease/3),
						"no outage answer while the store is healthy", ident, "delivery %d (%s, deadline %v) was told the store is unavailable: %s", d.id, d.plan.mode, d.plan.deadline, short(a.detail))
				} else if !d.storeFault {
					r.violate("no outage answer while the store is healthy", ident, "delivery %d (%s, deadline %v) was told the store is unavailable: %s", d.id, d.plan.mode, d.plan.deadline, short(a.detail))
				}
			case ansKeyReused:
				if !r.reused(d, byIdent[ident]) {
					r.violate("key reuse", ident, "delivery %d was told its key was reused with another request, but no delivery of its identity had another payload", d.id)
				}
			case ansOther:
				r.violate("every answer is mapped", ident, "delivery %d got an answer the door's protocol does not define: %s", d.id, short(a.detail))
			}
		}
		if hasQuery && final != nil && final.req.route == 0 && final.ans.kind == ansSuccess && len(effs) != 1 {
			// A second effect the stall excused (the query was asked before
			// the late effect reached the downstream) is the same window.
			if stallWhy != "" && len(effs) > 1 {
				r.excuse(stallWhy, "exactly-once (with a query)", ident, "the final retry succeeded but the downstream applied the effect %d times", len(effs))
			} else {
				r.violate("exactly-once (with a query)", ident, "the final retry succeeded but the downstream applied the effect %d times", len(effs))
			}
		}
		r.checkSettled(ident, final)
		r.checkRecord(ident, byIdent[ident][0].req, effs, windowed > 0, window)
	}
}

// checkSettled: a healthy retry, on a store that is up and with no lease
// live, ends its identity's record SUCCESS or FAILED. Only a stall past
// the lease rule's margin (the retry's own lease lost to the machine)
// excuses a record it left PROCESSING or UNKNOWN; the reconciler and the
// operator converged it since, which checkRecord checks.
func (r *run) checkSettled(ident string, final *delivery) {
	st, ok := r.unsettled[ident]
	if !ok {
		return
	}
	answer := "no final retry"
	if final != nil {
		answer = fmt.Sprintf("delivery %d answered %s: %s", final.id, final.ans.kind, short(final.ans.detail))
	}
	if !r.cfg.NoStallExcuses && r.stall >= r.cfg.Lease/10 {
		r.excuse(fmt.Sprintf("a stall of %v, past the lease rule's margin (%v): the retry's lease was lost to the machine", r.stall, r.cfg.Lease/10),
			"a healthy retry settles the record", ident, "the final retry left the record %s (%s)", st, answer)
		return
	}
	r.violate("a healthy retry settles the record", ident, "the final retry left the record %s (%s)", st, answer)
}

// checkRecord checks ident's final record against the downstream; in the
// at-least-once window (inWindow, explained by window) a FAILED record of
// an applied effect is excused.
// checkOwnWait: a DoTx caller is never made to wait for its own
// transaction. A savepoint retry's second call told ErrInProgress must
// have met another delivery of its identity in flight (the DoTx door has
// no crashes: a claim whose transaction ended is taken over at once).
func (r *run) checkOwnWait(ds []*delivery) {
	for _, d := range ds {
		from, to := d.retryWait[0], d.retryWait[1]
		if from.IsZero() {
			continue
		}
		other := false
		for _, o := range ds {
			if o != d && o.start.Before(to) && o.end.After(from) {
				other = true
				break
			}
		}
		if !other && d.firstLateStart && !r.cfg.NoStallExcuses && r.stall >= r.cfg.Lease/3 {
			// The first call's late start could not be confirmed in a
			// stall: its claim, never named for the transaction, is left
			// to its lease (as the runtime documents), and waited for.
			r.excuse(fmt.Sprintf("a stall of %v, past a third of the lease (%v): the first call's late start was not confirmed", r.stall, r.cfg.Lease/3),
				"a caller never waits for its own transaction", r.ident(d.req),
				"delivery %d: DoTx after its savepoint was rolled back was told ErrInProgress (%s), with no other delivery of the identity in flight", d.id, short(d.ans.detail))
		} else if !other {
			r.violate("a caller never waits for its own transaction", r.ident(d.req),
				"delivery %d: DoTx after its savepoint was rolled back was told ErrInProgress (%s), with no other delivery of the identity in flight", d.id, short(d.ans.detail))
		}
	}
}

func (r *run) checkRecord(ident string, rq *request, effs []effectRec, inWindow bool, window string) {
	id := r.idOf(rq)
	rec, err := r.cfg.Store.Get(context.Background(), id)
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		if len(effs) > 0 {
			r.violate("every record converges or is reported", ident, "the record is gone although the downstream applied %v", receipts(effs))
		}
	case err != nil:
		r.violate("every record converges or is reported", ident, "reading the record: %v", err)
	case rec.State == runtime.StateSuccess && len(effs) == 0 && r.name != DoorHTTP && r.name != DoorGRPC:
		// (HTTP and gRPC store a handler's failure answer, a 402 or a
		// non-retryable status, as a SUCCESS record: their clients'
		// answers are checked instead.)
		r.violate("the record agrees with the downstream", ident, "the record says SUCCESS but the downstream applied nothing")
	case rec.State == runtime.StateFailed && len(effs) > 0:
		if inWindow {
			r.excuse(window, "the record agrees with the downstream", ident, "the record says FAILED but the downstream applied %v", receipts(effs))
		} else {
			r.violate("the record agrees with the downstream", ident, "the record says FAILED but the downstream applied %v", receipts(effs))
		}
	case rec.State == runtime.StateProcessing || rec.State == runtime.StateUnknown:
		r.violate("every record converges or is reported", ident, "the record is still %s (owner %q) after the reconciler, the operator and a healthy retry", rec.State, rec.Owner)
	}
}

// learn notes the operation the door's runtime used for route (as stored:
// what the adapter derived from the request).
func (r *run) learn(route int, op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.learned[route] == "" {
		r.learned[route] = op
	}
}

// opOf is route's operation as stored, or the door's name for it when no
// handler of the route ran.
func (r *run) opOf(route int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.learned[route] != "" {
		return r.learned[route]
	}
	return r.door.ops()[route]
}

func (r *run) reused(d *delivery, all []*delivery) bool {
	for _, o := range all {
		if o.req.req.Amount != d.req.req.Amount {
			return true
		}
	}
	return false
}

func effsAmount(effs []effectRec) int64 { return effs[0].receipt.Amount }

func receipts(effs []effectRec) []string {
	var s []string
	for _, e := range effs {
		s = append(s, fmt.Sprintf("%s (delivery %d)", e.receipt.ID, e.delivery))
	}
	return s
}

// faultStore injects renewal faults and SUCCESS-write faults, and counts
// them.
type faultStore struct {
	runtime.Store
	r *run
}

// Transition fails every SUCCESS write, and every FAILED write, of a
// delivery whose plan says so, without calling the store. The delivery is found by the context the
// runtime writes with: it carries the caller's values (the deliveryKey set
// by deliver or the HTTP door's server, the gRPC door's incoming metadata).
// The reconciler's writes carry none and never fail.
func (f *faultStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	v, err := f.transition(ctx, p)
	if err == nil {
		f.r.wrote(p.ID, v)
	}
	return v, err
}

func (f *faultStore) transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if p.To != runtime.StateSuccess && p.To != runtime.StateFailed {
		return f.Store.Transition(ctx, p)
	}
	r := f.r
	d := r.deliveryByID(deliveryIn(ctx))
	if d != nil && p.To == runtime.StateFailed && d.plan.failFailed {
		r.mu.Lock()
		first := !d.failedFailed
		d.failedFailed, d.storeFault = true, true
		if first {
			r.faults["FAILED writes fail"]++
		}
		r.mu.Unlock()
		if first {
			r.note(r.ident(d.req), "fault: delivery %d's FAILED write fails (from %s, version %d)", d.id, p.From, p.Version)
		}
		return 0, errors.New("doors: injected FAILED write failure: connection reset")
	}
	if p.To == runtime.StateFailed {
		v, err := f.Store.Transition(ctx, p)
		if err == nil {
			r.mu.Lock()
			if _, ok := r.failedAt[p.ID]; !ok {
				r.failedAt[p.ID] = time.Now()
			}
			r.mu.Unlock()
		}
		return v, err
	}
	if d == nil || !d.plan.failSuccess {
		return f.Store.Transition(ctx, p)
	}
	r.mu.Lock()
	first := !d.successFailed
	d.successFailed, d.storeFault = true, true
	if first {
		r.faults["SUCCESS writes fail"]++
	}
	r.mu.Unlock()
	if first {
		r.note(r.ident(d.req), "fault: delivery %d's SUCCESS write fails (from %s, version %d)", d.id, p.From, p.Version)
	}
	return 0, errors.New("doors: injected SUCCESS write failure: connection reset")
}

// Claim and AcquirePending note the takeovers of a record whose call's
// handler is running (see takenOver).
func (f *faultStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := f.Store.Claim(ctx, p)
	if err == nil && res.Claimed {
		f.r.wrote(p.ID, res.Record.Version)
		if res.Record.Takeovers > 0 {
			f.r.takenOver(p.ID, fmt.Sprintf("a claim (owner %s, version %d)", p.Owner, res.Record.Version))
		}
	}
	return res, err
}

func (f *faultStore) AcquirePending(ctx context.Context, p runtime.AcquireParams) ([]runtime.Record, error) {
	recs, err := f.Store.AcquirePending(ctx, p)
	for _, rec := range recs {
		f.r.wrote(rec.ID, rec.Version)
		f.r.takenOver(rec.ID, fmt.Sprintf("the reconciler (version %d)", rec.Version))
	}
	return recs, err
}

func (f *faultStore) Release(ctx context.Context, p runtime.ReleaseParams) error {
	err := f.Store.Release(ctx, p)
	if err == nil {
		f.r.wrote(p.ID, 0)
	}
	return err
}

// wrote notes the version a write left a record at (0: released).
func (r *run) wrote(id runtime.Identity, version int64) {
	r.mu.Lock()
	r.versions[id] = version
	r.mu.Unlock()
}

// takenOver marks the deliveries whose handler runs for id as taken over
// live. A handler runs only while its call holds the lease, and the lease
// rule stops its effect a tenth of the lease before the lease could end:
// so a takeover during a handler means the process did not run for that
// margin (a stall, which the runtime documents as the limit of its
// guarantee without fencing), and the late effect may then reach the
// downstream after the query asked at the takeover, or beside the effect
// of the worker that took over (see secondEffectExcused).
//
// A takeover after a delivery's effect reached the downstream, whose
// outcome the runtime never recorded, is the other half of that window:
// its process stalled past the lease between the effect and the
// completion (or its completion timed out in the stall), and the worker
// that took over, with no query to ask, runs the effect again, whatever
// that run returns (see the at-least-once window in check).
func (r *run) takenOver(id runtime.Identity, by string) {
	r.mu.Lock()
	var live, after []*delivery
	for hr := range r.inHandler[id] {
		hr.takenOver = true
		live = append(live, hr.d)
	}
	if ident, ok := r.identOf[id]; ok {
		for _, e := range r.ledger[ident] {
			if d := r.byID[e.delivery]; d != nil && !d.recorded && !d.lostAfterEffect && !slices.Contains(live, d) {
				d.lostAfterEffect = true
				after = append(after, d)
			}
		}
	}
	r.mu.Unlock()
	for _, d := range live {
		r.note(r.ident(d.req), "store: the record was taken over by %s while delivery %d's handler ran", by, d.id)
	}
	for _, d := range after {
		r.note(r.ident(d.req), "store: the record was taken over by %s after delivery %d's effect, before its outcome was recorded", by, d.id)
	}
}

// handlerRun is one run of a delivery's handler (a delivery's call can run
// it again: grpc retries an answer lost in transport).
type handlerRun struct {
	d *delivery
	// takenOver: the call's record was taken over while it ran (under
	// run.mu).
	takenOver bool
}

func (f *faultStore) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	r := f.r
	r.mu.Lock()
	d := r.renewing[p.ID]
	r.mu.Unlock()
	if d == nil {
		// An unfaulted renewal that answers late was starved (the
		// machine, or the server beside it): it counts as a stall, as
		// the scheduler's own lateness does (stall.TimedRenew).
		return stall.TimedRenew{Store: f.Store, W: r.watch}.Renew(ctx, p)
	}
	ident := r.ident(d.req)
	r.mu.Lock()
	r.faults[renewNames[d.plan.variant]]++
	r.faulted[ident] = true
	d.storeFault = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.faulted[ident] = false
		r.mu.Unlock()
	}()
	third := r.cfg.Lease / 3
	switch d.plan.variant {
	case 0:
		r.note(ident, "fault: renewal delayed %v", third)
		time.Sleep(third)
		return f.Store.Renew(ctx, p)
	case 1:
		r.note(ident, "fault: renewal fails")
		return time.Time{}, errors.New("doors: injected renewal failure: connection reset")
	}
	r.note(ident, "fault: renewal hangs %v, then times out", third)
	time.Sleep(third)
	return time.Time{}, fmt.Errorf("doors: renewal: %w", context.DeadlineExceeded)
}
