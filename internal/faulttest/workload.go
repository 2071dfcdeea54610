package faulttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// Where a fault is armed: the first call of a key that reaches the phase
// installs the toxic, and it is removed when that call returns or after
// maxHold, whichever comes first (calls of other attempts in that window
// meet it too).
const (
	AtClaim    = "claim"    // Store.Claim
	AtComplete = "complete" // Store.Transition: recording an outcome
)

// maxHold bounds a fault's life: the caller's deadline (the runtime's
// completion timeout and the clients' deadline are a second). A store call
// may wait longer than its caller's deadline for a reply it cannot give up
// on (a group-commit batch in flight answers its callers only when it
// ends, up to 30 s): tied to that call alone, a fault that holds replies
// would last as long as the call it stalls, a partition that heals only
// when its victim gives up, which no network does.
const maxHold = time.Second

// Fault is one scenario of the workload.
type Fault struct {
	Name  string
	Phase string // AtClaim or AtComplete
	Toxic Toxic
	// SlowQuery makes the first query of each key answer only after twice
	// the lease: a duplicate takes the record over meanwhile.
	SlowQuery bool
}

// Faults are the scenarios every store runs: latency, a reply held until
// the caller's deadline (timeout), the connection reset before the request
// reached the server (reset_peer upstream) or after the server applied it
// (reset_peer downstream: the acknowledgement is lost), a request cut
// mid-way (limit_data) and replies sliced into bytes (slicer), at the claim
// and at the completion; and a lost claim acknowledgement whose takeover
// meets a query slower than the lease.
func Faults() []Fault {
	latency := func(ms int) Toxic {
		return Toxic{Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": ms, "jitter": ms / 4}}
	}
	timeout := Toxic{Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
	resetBefore := Toxic{Type: "reset_peer", Stream: "upstream", Attributes: map[string]any{"timeout": 0}}
	resetAfter := Toxic{Type: "reset_peer", Stream: "downstream", Attributes: map[string]any{"timeout": 0}}
	limit := Toxic{Type: "limit_data", Stream: "upstream", Attributes: map[string]any{"bytes": 12}}
	// Small slices, barely delayed (microseconds): partial reads, never
	// a reply held anywhere near the lease.
	slicer := Toxic{Type: "slicer", Stream: "downstream", Attributes: map[string]any{"average_size": 4, "size_variation": 3, "delay": 10}}
	var fs []Fault
	for _, ph := range []string{AtClaim, AtComplete} {
		fs = append(fs,
			Fault{Name: ph + "/latency", Phase: ph, Toxic: latency(100)},
			Fault{Name: ph + "/latency-past-lease", Phase: ph, Toxic: latency(500)},
			Fault{Name: ph + "/timeout", Phase: ph, Toxic: timeout},
			Fault{Name: ph + "/reset-before-apply", Phase: ph, Toxic: resetBefore},
			Fault{Name: ph + "/reset-after-apply", Phase: ph, Toxic: resetAfter},
			Fault{Name: ph + "/limit-data", Phase: ph, Toxic: limit},
			Fault{Name: ph + "/slicer", Phase: ph, Toxic: slicer},
		)
	}
	return append(fs, Fault{Name: "claim/reset-after-apply+slow-query", Phase: AtClaim, Toxic: resetAfter, SlowQuery: true})
}

// Target is a store under test.
type Target struct {
	// Proxied is the store whose connections go through Proxy.
	Proxied runtime.Store
	// Direct holds the same records without the proxy: the reconciler and
	// the checks use it.
	Direct runtime.Store
	// Proxies carry the store's connections (one per server: a Redis
	// Cluster has one per master); a fault is armed on all of them.
	Proxies []*Proxy
}

// Config sizes the workload.
type Config struct {
	Keys       int           // keys per fault, run one after the other (default IDEM_FAULT_KEYS, else 2)
	Duplicates int           // concurrent duplicate clients per key (default 4)
	Lease      time.Duration // default 300ms
}

// Request and Receipt are the downstream's.
type Request struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

type Receipt struct {
	ID     string `json:"id"`
	Token  int64  `json:"token"`
	Amount int64  `json:"amount"`
}

var errStale = errors.New("downstream: stale fencing token")

// ledger is a fenced, append-only downstream in memory: it keeps every
// charge (a double effect is two), and a charge or query with token t makes
// later requests with a lower token stale.
type ledger struct {
	mu      sync.Mutex
	fence   map[string]int64
	charges map[string][]Receipt
	reruns  map[string]int // effects started after the key was charged
	excused map[string]int // of which started a lease or more after their grant
	stale   map[string]int // requests refused by the fence
}

func newLedger() *ledger {
	return &ledger{fence: map[string]int64{}, charges: map[string][]Receipt{}, reruns: map[string]int{}, excused: map[string]int{}, stale: map[string]int{}}
}

func (l *ledger) admit(a runtime.Attempt) bool {
	if a.FencingToken < l.fence[a.DownstreamKey] {
		l.stale[a.DownstreamKey]++
		return false
	}
	l.fence[a.DownstreamKey] = a.FencingToken
	return true
}

func (l *ledger) fenceOf(dk string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fence[dk]
}

// charge appends a charge; late says the attempt's lease may have run out
// before the effect started (see doTrace.late).
func (l *ledger) charge(ctx context.Context, r Request, late bool) (Receipt, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return Receipt{}, errors.New("downstream: no attempt")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	dk := a.DownstreamKey
	if len(l.charges[dk]) > 0 {
		l.reruns[dk]++
		if late {
			l.excused[dk]++
		}
	}
	if !l.admit(a) {
		return Receipt{}, runtime.Permanent(fmt.Errorf("%w: %d", errStale, a.FencingToken))
	}
	rc := Receipt{ID: fmt.Sprintf("ch_%s_%d", dk[:8], a.FencingToken), Token: a.FencingToken, Amount: r.Amount}
	l.charges[dk] = append(l.charges[dk], rc)
	return rc, nil
}

func (l *ledger) find(ctx context.Context, _ Request) (Receipt, runtime.Outcome, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return Receipt{}, runtime.OutcomeUnknown, errors.New("downstream: no attempt")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.admit(a) {
		return Receipt{}, runtime.OutcomeUnknown, fmt.Errorf("%w: query with %d", errStale, a.FencingToken)
	}
	if cs := l.charges[a.DownstreamKey]; len(cs) > 0 {
		return cs[0], runtime.OutcomeSucceeded, nil
	}
	return Receipt{}, runtime.OutcomeNotHappened, nil
}

// keyState arms a key's fault once.
type keyState struct {
	fault   *Fault
	proxies []*Proxy
	armed   atomic.Bool
	slow    atomic.Bool // the slow query was used
	hits    atomic.Int32
}

// arm installs the toxic if this is the first call of the key at phase and
// returns what removes it.
func (k *keyState) arm(phase string) func() {
	if k == nil || k.fault.Phase != phase || !k.armed.CompareAndSwap(false, true) {
		return func() {}
	}
	x := k.fault.Toxic
	x.Name = "fault"
	for _, p := range k.proxies {
		if err := p.Add(x); err != nil {
			panic(err) // a bad toxic is a bug of the test
		}
	}
	k.hits.Add(1)
	var once sync.Once
	remove := func() {
		once.Do(func() {
			for _, p := range k.proxies {
				p.Remove(x.Name)
			}
		})
	}
	healed := time.AfterFunc(maxHold, remove)
	return func() {
		healed.Stop()
		remove()
	}
}

// doTrace is what one runtime.Do call did, seen from the store and effect.
type doTrace struct {
	ks          *keyState
	mu          sync.Mutex
	transitions []runtime.TransitionParams
	tokens      []int64 // fencing tokens the effect ran with
	// granted is when the latest store call that granted or confirmed
	// this attempt's lease (a claim that claimed, a transition to
	// PROCESSING, a renewal) started: the store set the lease after that,
	// so it runs at least until granted + lease. queried is when the
	// latest query of this attempt returned.
	granted, queried time.Time
}

func (tr *doTrace) grant(start time.Time) {
	tr.mu.Lock()
	if start.After(tr.granted) {
		tr.granted = start
	}
	tr.mu.Unlock()
}

// late reports, as the effect starts, whether its lease may have run out:
// a lease or more passed since the latest grant, and the runtime did not act
// on a query answer it got after that grant without confirming the lease
// (acting on a query that outlived the lease is the runtime's fault, however
// long it took).
func (tr *doTrace) late(lease time.Duration) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return time.Since(tr.granted) >= lease && !tr.queried.After(tr.granted)
}

type traceKey struct{}

func traceFrom(ctx context.Context) *doTrace {
	tr, _ := ctx.Value(traceKey{}).(*doTrace)
	return tr
}

// hooked arms faults around the store calls of traced Do calls.
type hooked struct{ runtime.Store }

func (h hooked) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	var ks *keyState
	if tr := traceFrom(ctx); tr != nil {
		ks = tr.ks
	}
	defer ks.arm(AtClaim)()
	start := time.Now()
	res, err := h.Store.Claim(ctx, p)
	if tr := traceFrom(ctx); tr != nil && err == nil && res.Claimed {
		tr.grant(start)
	}
	return res, err
}

func (h hooked) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	start := time.Now()
	until, err := h.Store.Renew(ctx, p)
	if tr := traceFrom(ctx); tr != nil && err == nil {
		tr.grant(start)
	}
	return until, err
}

func (h hooked) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	tr := traceFrom(ctx)
	var ks *keyState
	if tr != nil {
		ks = tr.ks
		tr.mu.Lock()
		tr.transitions = append(tr.transitions, p)
		tr.mu.Unlock()
	}
	defer ks.arm(AtComplete)()
	start := time.Now()
	v, err := h.Store.Transition(ctx, p)
	if tr != nil && err == nil && p.To == runtime.StateProcessing {
		tr.grant(start)
	}
	return v, err
}

type doResult struct {
	client int
	trace  *doTrace
	resp   Receipt
	err    error
	took   time.Duration
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, runtime.ErrInProgress):
		return "in-progress"
	case errors.Is(err, runtime.ErrOutcomeUnknown):
		return "outcome-unknown"
	case errors.Is(err, runtime.ErrLeaseLost):
		return "lease-lost"
	case errors.Is(err, runtime.ErrPermanent):
		return "failed"
	}
	return "other"
}

// Run runs every fault of Faults against tg and checks, for every key:
//   - nothing lost: the record ends SUCCESS, and every client, retrying
//     whatever it is told but a replayed permanent failure, gets success
//     within a generous deadline;
//   - nothing run twice: exactly one charge downstream, and no effect starts
//     after the downstream was charged, unless a lease or more passed since
//     the store granted or confirmed the attempt's lease (a scheduler stall
//     or a reply held in transit, where only the fence can help) — acting
//     on a query answer without confirming the lease is never excused;
//   - every client told success got the stored response, the one charge;
//   - no client is told ErrLeaseLost for an attempt whose own completion
//     was applied (the record's version is the one that completion set).
func Run(t *testing.T, tg Target, cfg Config) {
	if cfg.Keys <= 0 {
		cfg.Keys = 2
		if v, err := strconv.Atoi(os.Getenv("IDEM_FAULT_KEYS")); err == nil && v > 0 {
			cfg.Keys = v
		}
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = 4
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 300 * time.Millisecond
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	uniq := hex.EncodeToString(rnd[:])
	scope := "faulttest/" + uniq
	op := "Fault.Charge." + uniq
	l := newLedger()
	h := hooked{tg.Proxied}
	var rts []*runtime.Runtime
	for _, name := range []string{"a", "b"} {
		rt, err := runtime.New(h, runtime.WithOwner("faulttest/"+uniq+"/"+name), runtime.WithLease(cfg.Lease),
			runtime.WithMaxWait(cfg.Lease+100*time.Millisecond), runtime.WithCompletionTimeout(time.Second),
			runtime.WithQueryTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rts = append(rts, rt)
	}
	// The reconciler works on the records directly, as a separate process
	// on a healthy network would.
	rrt, err := runtime.New(tg.Direct, runtime.WithOwner("faulttest/"+uniq+"/reconciler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Register(rrt, op, l.find, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err := runtime.NewReconciler(rrt, runtime.ReconcileInterval(20*time.Millisecond),
		runtime.ReconcileBackoff(10*time.Millisecond, 50*time.Millisecond), runtime.ReconcileLease(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	rdone := make(chan struct{})
	go func() { defer close(rdone); _ = rec.Run(rctx) }()
	defer func() { stop(); <-rdone }()

	type faultStats struct {
		kinds           map[string]int
		reruns, excused int
		stale, fails    int
		took            time.Duration
	}
	stats := map[string]*faultStats{}
	faults := Faults()
	for fi := range faults {
		f := &faults[fi]
		st := &faultStats{kinds: map[string]int{}}
		stats[f.Name] = st
		start := time.Now()
		for k := range cfg.Keys {
			key := fmt.Sprintf("f%d-k%d", fi, k)
			ks := &keyState{fault: f, proxies: tg.Proxies}
			results := runKey(rts, l, f, ks, scope, op, key, cfg)
			problems := checkKey(tg.Direct, rts[0].Codec(), l, scope, op, key, results)
			id := runtime.Identity{Scope: scope, Operation: op, Key: key}
			dk := runtime.DownstreamKey(id)
			l.mu.Lock()
			st.reruns += l.reruns[dk]
			st.excused += l.excused[dk]
			st.stale += l.stale[dk]
			l.mu.Unlock()
			for _, r := range results {
				st.kinds[errKind(r.err)]++
			}
			if len(problems) == 0 && os.Getenv("IDEM_FAULT_VERBOSE") != "" {
				t.Logf("fault %s, key %s: ok\n\t\t%s", f.Name, key, describe(results))
			}
			if len(problems) > 0 {
				st.fails++
				t.Errorf("fault %s (%v at %s), key %s:\n\t%s\n\tclient calls:\n\t\t%s", f.Name, f.Toxic, f.Phase, key,
					strings.Join(problems, "\n\t"), describe(results))
			}
		}
		st.took = time.Since(start)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %5s  %-60s %14s %6s %6s\n", "fault", "keys", "client calls by result", "reruns/excused", "fenced", "time")
	for _, f := range faults {
		st := stats[f.Name]
		var kinds []string
		for k, n := range st.kinds {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		}
		sort.Strings(kinds)
		status := ""
		if st.fails > 0 {
			status = fmt.Sprintf("  FAILED %d", st.fails)
		}
		fmt.Fprintf(&b, "%-36s %5d  %-60s %14s %6d %6v%s\n", f.Name, cfg.Keys, strings.Join(kinds, " "),
			fmt.Sprintf("%d/%d", st.reruns, st.excused), st.stale,
			st.took.Round(time.Millisecond), status)
	}
	t.Log("\n" + b.String())
}

// runKey runs concurrent duplicates of one key until each got success or
// gave up (a permanent failure, or the deadline).
func runKey(rts []*runtime.Runtime, l *ledger, f *Fault, ks *keyState, scope, op, key string, cfg Config) []doResult {
	query := func(ctx context.Context, r Request) (Receipt, runtime.Outcome, error) {
		rc, o, err := l.find(ctx, r)
		if f.SlowQuery && ks.slow.CompareAndSwap(false, true) {
			select { // the answer comes back late, after the lease ran out
			case <-time.After(2 * cfg.Lease):
			case <-ctx.Done():
			}
		}
		if tr := traceFrom(ctx); tr != nil {
			tr.mu.Lock()
			tr.queried = time.Now()
			tr.mu.Unlock()
		}
		return rc, o, err
	}
	var mu sync.Mutex
	var results []doResult
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	ready := make(chan struct{})
	for c := range cfg.Duplicates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := rts[c%len(rts)]
			<-ready
			for i := 0; ; i++ {
				tr := &doTrace{ks: ks}
				ctx := context.WithValue(runtime.WithScope(context.Background(), scope), traceKey{}, tr)
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				t0 := time.Now()
				resp, err := runtime.Do(ctx, rt, runtime.Call[Request, Receipt]{
					Operation: op, Key: key, Request: Request{Account: "acct", Amount: 100},
					Effect: func(ctx context.Context, r Request) (Receipt, error) {
						late := tr.late(cfg.Lease)
						if a, ok := runtime.AttemptFrom(ctx); ok {
							tr.mu.Lock()
							tr.tokens = append(tr.tokens, a.FencingToken)
							tr.mu.Unlock()
						}
						return l.charge(ctx, r, late)
					},
					Query: query,
				})
				cancel()
				mu.Lock()
				results = append(results, doResult{client: c, trace: tr, resp: resp, err: err, took: time.Since(t0)})
				mu.Unlock()
				// A client told the lease was lost retries, as one told
				// the call is in progress or its outcome unknown; a
				// replayed permanent failure is final.
				final := errors.Is(err, runtime.ErrPermanent) && !errors.Is(err, runtime.ErrLeaseLost)
				if err == nil || final || time.Now().After(deadline) {
					return
				}
				time.Sleep(time.Duration(5+5*(i%4)) * time.Millisecond)
			}
		}()
	}
	close(ready)
	wg.Wait()
	return results
}

func checkKey(s runtime.Store, codec runtime.Codec, l *ledger, scope, op, key string, results []doResult) []string {
	var problems []string
	id := runtime.Identity{Scope: scope, Operation: op, Key: key}
	dk := runtime.DownstreamKey(id)
	l.mu.Lock()
	charges := append([]Receipt(nil), l.charges[dk]...)
	reruns, excused, stale := l.reruns[dk], l.excused[dk], l.stale[dk]
	l.mu.Unlock()
	if len(charges) != 1 {
		problems = append(problems, fmt.Sprintf("%d charges downstream, want exactly 1: %+v", len(charges), charges))
	}
	if reruns > excused {
		problems = append(problems, fmt.Sprintf("%d effects started after the downstream had charged, within a lease of their grant or on a query answer without confirming the lease (%d requests fenced off)",
			reruns-excused, stale))
	}
	rec, err := s.Get(context.Background(), id)
	if err != nil {
		return append(problems, fmt.Sprintf("the record: %v", err))
	}
	var stored Receipt
	if rec.State != runtime.StateSuccess {
		problems = append(problems, fmt.Sprintf("the record ended %s (version %d, owner %q), want SUCCESS", rec.State, rec.Version, rec.Owner))
	} else if err := codec.Unmarshal(rec.Response, &stored); err != nil {
		problems = append(problems, fmt.Sprintf("the stored response %q: %v", rec.Response, err))
	} else if len(charges) > 0 && stored != charges[0] {
		problems = append(problems, fmt.Sprintf("the record holds %+v, the downstream charged %+v", stored, charges[0]))
	}
	clients := map[int]bool{}
	for _, r := range results {
		if r.err == nil {
			clients[r.client] = true
			if rec.State == runtime.StateSuccess && r.resp != stored {
				problems = append(problems, fmt.Sprintf("client %d was told success with %+v, the record holds %+v", r.client, r.resp, stored))
			}
		}
		if errors.Is(r.err, runtime.ErrLeaseLost) && rec.State == runtime.StateSuccess {
			for _, tp := range r.trace.transitions {
				if tp.To == runtime.StateSuccess && rec.Version == tp.Version+1 {
					problems = append(problems, fmt.Sprintf("client %d was told the lease was lost, but its own completion (%s from version %d) was applied: %v",
						r.client, tp.To, tp.Version, r.err))
					break
				}
			}
		}
	}
	for c := range len(clientsOf(results)) {
		if !clients[c] {
			problems = append(problems, fmt.Sprintf("client %d never got success", c))
		}
	}
	if len(problems) > 0 {
		problems = append(problems, fmt.Sprintf("(the record: %s version %d holding %+v; the fence at %d)", rec.State, rec.Version, stored, l.fenceOf(dk)))
	}
	return problems
}

func clientsOf(results []doResult) map[int]bool {
	m := map[int]bool{}
	for _, r := range results {
		m[r.client] = true
	}
	return m
}

func describe(results []doResult) string {
	var lines []string
	for _, r := range results {
		line := fmt.Sprintf("client %d: %s in %v", r.client, errKind(r.err), r.took.Round(time.Millisecond))
		if r.err != nil {
			line += ": " + r.err.Error()
		} else {
			line += fmt.Sprintf(": %+v", r.resp)
		}
		r.trace.mu.Lock()
		if len(r.trace.tokens) > 0 {
			line += fmt.Sprintf(" [effect with tokens %v]", r.trace.tokens)
		}
		for _, tp := range r.trace.transitions {
			line += fmt.Sprintf(" [transition %s v%d -> %s]", tp.From, tp.Version, tp.To)
		}
		r.trace.mu.Unlock()
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n\t\t")
}
