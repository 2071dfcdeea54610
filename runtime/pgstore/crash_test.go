package pgstore_test

// The process-level crash test: worker processes (this test binary re-run
// with crashWorkerVar set) call runtime.Do on PostgreSQL with a remote-style
// effect on a downstream that outlives them, and the test SIGKILLs them at
// every phase boundary, then lets retries (more worker processes) and a
// reconciler converge each request.
//
// The downstream is an append-only ledger table written by one autocommitted
// statement (no unique constraint: a double effect is two rows), fenced per
// downstream key by the attempt's fencing token in a fence table: a charge
// or query with token t makes every later request with a lower token stale.
// The operation's query ("did a charge with this downstream key happen?")
// first raises the fence to its own token, in a statement of its own, and
// then reads the ledger: a charge still in flight from a killed worker either
// committed before the fence moved (and the read sees it) or is refused.
//
//	IDEM_CRASH_RUNS=1000 go test -run TestCrash ./runtime/pgstore   (bench/crash.sh)
//	IDEM_CRASH_SEED=<seed from a failing run> reproduces its schedules
//	IDEM_CRASH_VERBOSE=1 prints every run's transcript, IDEM_CRASH_PARALLEL=n runs n at once (4)

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// crashWorkerVar carries a worker's configuration (JSON); when it is set the
// test binary runs as a worker instead of running tests.
const crashWorkerVar = "IDEM_CRASH_WORKER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(crashWorkerVar); cfg != "" {
		os.Exit(crashWorker(cfg))
	}
	os.Exit(m.Run())
}

// The points where a worker is killed. The worker announces each on stdout
// ("AT <point>") and, for the blocking ones, waits there to be killed; for
// the in-flight ones the parent kills it after a random short delay while
// the statement is on its way or being applied.
const (
	atClaimed        = "claimed"         // the claim committed, the effect has not started
	atEffectSent     = "effect-sent"     // the ledger statement is starting (kill after 0-300us)
	atEffectWritten  = "effect-written"  // the ledger row committed, the effect has not returned
	atEffectReturned = "effect-returned" // the effect returned, the completion has not started
	atCompleteSent   = "complete-sent"   // the completion statement is starting (kill after 0-300us)
	atCompleteDone   = "complete-done"   // the completion committed and was acknowledged, Do has not returned
)

var crashPoints = []string{atClaimed, atEffectSent, atEffectWritten, atEffectReturned, atCompleteSent, atCompleteDone}

// inFlight reports whether the parent kills at a random delay after the
// announcement (the worker does not wait there).
func inFlight(point string) bool { return point == atEffectSent || point == atCompleteSent }

type crashReq struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

type crashReceipt struct {
	ID     int64 `json:"id"`
	Amount int64 `json:"amount"`
}

// workerConfig is what a worker process is told.
type workerConfig struct {
	DSN       string        `json:"dsn"`
	Scope     string        `json:"scope"`
	Operation string        `json:"operation"`
	Key       string        `json:"key"`
	Ledger    string        `json:"ledger"`
	Fence     string        `json:"fence"`
	Stop      string        `json:"stop"` // crash point to announce ("" runs to the end)
	Lease     time.Duration `json:"lease"`
	MaxWait   time.Duration `json:"max_wait"`
	Deadline  time.Duration `json:"deadline"` // how long the worker retries ErrInProgress and ErrOutcomeUnknown
}

// downstream is the ledger and fence tables.
type downstream struct {
	pool   *pgxpool.Pool
	ledger string
	fence  string
}

var errStaleToken = errors.New("downstream: stale fencing token")

const chargeMarker = "-- crash: charge\n"

// charge fences and appends one ledger row in one autocommitted statement.
func (d downstream) charge(ctx context.Context, r crashReq) (crashReceipt, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return crashReceipt{}, errors.New("downstream: no attempt in context")
	}
	var id int64
	err := d.pool.QueryRow(ctx, chargeMarker+fmt.Sprintf(`WITH f AS (
	INSERT INTO %[2]s AS f (dk, token) VALUES ($1, $2)
	ON CONFLICT (dk) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
	RETURNING 1
)
INSERT INTO %[1]s (dk, token, account, amount) SELECT $1, $2, $3, $4 FROM f RETURNING id`, d.ledger, d.fence),
		a.DownstreamKey, a.FencingToken, r.Account, r.Amount).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return crashReceipt{}, runtime.Permanent(fmt.Errorf("%w: %d", errStaleToken, a.FencingToken))
	}
	if err != nil {
		return crashReceipt{}, fmt.Errorf("downstream: charge: %w", err)
	}
	return crashReceipt{ID: id, Amount: r.Amount}, nil
}

// find raises the fence to the query's token, then reads the ledger.
func (d downstream) find(ctx context.Context, _ crashReq) (crashReceipt, runtime.Outcome, error) {
	a, ok := runtime.AttemptFrom(ctx)
	if !ok {
		return crashReceipt{}, runtime.OutcomeUnknown, errors.New("downstream: no attempt in context")
	}
	tag, err := d.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s AS f (dk, token) VALUES ($1, $2)
	ON CONFLICT (dk) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token`, d.fence),
		a.DownstreamKey, a.FencingToken)
	if err != nil {
		return crashReceipt{}, runtime.OutcomeUnknown, fmt.Errorf("downstream: fence: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return crashReceipt{}, runtime.OutcomeUnknown, fmt.Errorf("%w: query with %d", errStaleToken, a.FencingToken)
	}
	var rc crashReceipt
	err = d.pool.QueryRow(ctx, fmt.Sprintf(`SELECT id, amount FROM %s WHERE dk = $1 ORDER BY id LIMIT 1`, d.ledger),
		a.DownstreamKey).Scan(&rc.ID, &rc.Amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return crashReceipt{}, runtime.OutcomeNotHappened, nil
	}
	if err != nil {
		return crashReceipt{}, runtime.OutcomeUnknown, fmt.Errorf("downstream: find: %w", err)
	}
	return rc, runtime.OutcomeSucceeded, nil
}

// charges returns the ledger rows of a downstream key.
func (d downstream) charges(ctx context.Context, dk string) ([]crashReceipt, error) {
	rows, err := d.pool.Query(ctx, fmt.Sprintf(`SELECT id, amount FROM %s WHERE dk = $1 ORDER BY id`, d.ledger), dk)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (crashReceipt, error) {
		var rc crashReceipt
		err := row.Scan(&rc.ID, &rc.Amount)
		return rc, err
	})
}

// workerTracer announces the statements the crash points name.
type workerTracer struct {
	at func(point string, block bool)
}

type traceKey struct{}

func (w workerTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case strings.HasPrefix(d.SQL, chargeMarker):
		w.at(atEffectSent, false)
	case strings.HasPrefix(d.SQL, "-- name: Transition "), strings.HasPrefix(d.SQL, "-- name: TransitionCAS "):
		w.at(atCompleteSent, false)
		return context.WithValue(ctx, traceKey{}, true)
	}
	return ctx
}

func (w workerTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(traceKey{}) != nil && d.Err == nil {
		w.at(atCompleteDone, true)
	}
}

// crashWorker is the worker process: one runtime.Do (retried while the
// outcome is in progress or unknown), reporting on stdout.
func crashWorker(cfgJSON string) int {
	var c workerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &c); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad config:", err)
		return 2
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	at := func(point string, block bool) {
		if point != c.Stop {
			return
		}
		say("AT %s", point)
		if block || !inFlight(point) {
			for {
				time.Sleep(time.Hour) // until killed
			}
		}
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	pcfg.MaxConns = 4
	pcfg.ConnConfig.Tracer = workerTracer{at: at}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer pool.Close()
	d := downstream{pool: pool, ledger: c.Ledger, fence: c.Fence}
	var evMu sync.Mutex
	var events []string
	obs := runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
		if e.Kind == runtime.EventPhase {
			if e.Phase == runtime.PhaseEffect {
				at(atEffectReturned, true)
			}
			return
		}
		ev := e.Kind.String()
		if e.State != "" {
			ev += ":" + string(e.State)
		}
		evMu.Lock()
		events = append(events, ev)
		evMu.Unlock()
	})
	rt, err := runtime.New(pgstore.New(pool), runtime.WithLease(c.Lease), runtime.WithMaxWait(c.MaxWait),
		runtime.WithObserver(obs))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	ctx = runtime.WithScope(ctx, c.Scope)
	deadline := time.Now().Add(c.Deadline)
	for {
		got, err := runtime.Do(ctx, rt, runtime.Call[crashReq, crashReceipt]{
			Operation: c.Operation, Key: c.Key, Request: crashReq{Account: "acct", Amount: 100},
			Effect: func(ctx context.Context, r crashReq) (crashReceipt, error) {
				at(atClaimed, true)
				rc, err := d.charge(ctx, r)
				if err != nil {
					return crashReceipt{}, err
				}
				at(atEffectWritten, true)
				return rc, nil
			},
			Query: d.find,
		})
		evMu.Lock()
		say("EVENTS %s", strings.Join(events, ","))
		events = events[:0]
		evMu.Unlock()
		if err == nil {
			b, _ := json.Marshal(got)
			say("RESULT ok %s", b)
			return 0
		}
		say("ERR %s %s", errKind(err), strings.ReplaceAll(err.Error(), "\n", " | "))
		if (errors.Is(err, runtime.ErrInProgress) || errors.Is(err, runtime.ErrOutcomeUnknown)) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		say("RESULT err %s", errKind(err))
		return 1
	}
}

func errKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{runtime.ErrInProgress, "in-progress"}, {runtime.ErrOutcomeUnknown, "outcome-unknown"},
		{runtime.ErrLeaseLost, "lease-lost"}, {runtime.ErrPermanent, "failed"}, {runtime.ErrKeyReused, "key-reused"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// worker is a running worker process seen from the test.
type worker struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *strings.Builder
	out    []string // every line read so far
	start  time.Time
	exited time.Duration
	stamps []time.Duration // when each line of out was read, since start
}

func (w *worker) read(line string) {
	w.out = append(w.out, line)
	w.stamps = append(w.stamps, time.Since(w.start))
}

func startWorker(c workerConfig) (*worker, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// A race-enabled binary sleeps 1s at exit by default (atexit_sleep_ms).
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), crashWorkerVar+"="+string(b), "GORACE="+gorace)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, lines: make(chan string, 64), stderr: &strings.Builder{}, start: time.Now()}
	cmd.Stderr = &lockedWriter{b: w.stderr}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w, nil
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// workerTimeout bounds every wait on a worker: generous, for a loaded
// machine; reaching it is a failure, never a pass.
const workerTimeout = 60 * time.Second

// killAt waits until the worker announces point, then kills it (after delay)
// and reaps it. reached is false when the worker ended without reaching the
// point (it replayed, or converged another way).
func (w *worker) killAt(point string, delay time.Duration) (reached bool, err error) {
	timeout := time.NewTimer(workerTimeout)
	defer timeout.Stop()
	for !reached {
		select {
		case line, ok := <-w.lines:
			if !ok {
				return false, w.wait()
			}
			w.read(line)
			reached = line == "AT "+point
		case <-timeout.C:
			_ = w.cmd.Process.Kill()
			_ = w.wait()
			return false, fmt.Errorf("worker did not reach %s within %v", point, workerTimeout)
		}
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if err := w.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return true, err
	}
	_ = w.wait()
	return true, nil
}

// finish reads the worker's output to the end and reaps it.
func (w *worker) finish() error {
	timeout := time.NewTimer(workerTimeout)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				return w.wait()
			}
			w.read(line)
		case <-timeout.C:
			_ = w.cmd.Process.Kill()
			_ = w.wait()
			return fmt.Errorf("worker did not finish within %v", workerTimeout)
		}
	}
}

func (w *worker) wait() error {
	for range w.lines { // drain
	}
	err := w.cmd.Wait()
	w.exited = time.Since(w.start)
	return err
}

// result returns the worker's final "RESULT" line without the prefix.
func (w *worker) result() string {
	for i := len(w.out) - 1; i >= 0; i-- {
		if r, ok := strings.CutPrefix(w.out[i], "RESULT "); ok {
			return r
		}
	}
	return ""
}

func (w *worker) transcript() string {
	var b strings.Builder
	for i, l := range w.out {
		fmt.Fprintf(&b, "%8.1fms %s\n\t\t", float64(w.stamps[i].Microseconds())/1000, l)
	}
	fmt.Fprintf(&b, "%8.1fms exit; stderr: %s", float64(w.exited.Microseconds())/1000, w.stderr.String())
	return b.String()
}

// crashSchedule is what happens to one request.
type crashSchedule struct {
	run      int
	key      string
	first    string        // crash point of the first worker
	delay    time.Duration // kill delay for an in-flight point
	recovery string        // "retry": a worker retries; "reconcile": the reconciler first; "race": both at once
	second   string        // crash point of a second worker ("" for none)
	delay2   time.Duration
}

func (s crashSchedule) String() string {
	str := fmt.Sprintf("run %d key %s: kill at %s", s.run, s.key, s.first)
	if inFlight(s.first) {
		str += fmt.Sprintf("+%v", s.delay)
	}
	if s.second != "" {
		str += ", kill the retry at " + s.second
		if inFlight(s.second) {
			str += fmt.Sprintf("+%v", s.delay2)
		}
	}
	return str + ", then " + s.recovery
}

// crashOutcome is what the test observed of one run, for the counts.
type crashOutcome struct {
	sched       crashSchedule
	reached     bool   // the first worker reached its crash point
	stateAtKill string // record state and ledger rows read right after the first kill
	recovered   string // how the final worker got its answer (its events)
	errs        []string
	took        time.Duration
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestCrashProcesses kills worker processes at each phase boundary and checks
// that retries and the reconciler converge every request to SUCCESS with
// exactly one ledger row, the response every client got.
func TestCrashProcesses(t *testing.T) {
	p := testPool(t)
	dsn := os.Getenv("IDEM_TEST_POSTGRES_URL")
	runs := envInt(t, "IDEM_CRASH_RUNS", 60)
	parallel := envInt(t, "IDEM_CRASH_PARALLEL", 4)
	seed := uint64(envInt(t, "IDEM_CRASH_SEED", int(time.Now().UnixNano()%(1<<40)+1)))
	t.Logf("IDEM_CRASH_RUNS=%d IDEM_CRASH_SEED=%d IDEM_CRASH_PARALLEL=%d", runs, seed, parallel)

	ctx := context.Background()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	d := downstream{pool: p, ledger: "crash_ledger_" + suffix, fence: "crash_fence_" + suffix}
	if _, err := p.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigserial PRIMARY KEY, dk text NOT NULL, token bigint NOT NULL,
		account text NOT NULL, amount bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON %[1]s (dk);
		CREATE TABLE %s (dk text PRIMARY KEY, token bigint NOT NULL)`, d.ledger, d.fence)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() { // keep the evidence of a failure
			_, _ = p.Exec(context.Background(), fmt.Sprintf("DROP TABLE %s, %s", d.ledger, d.fence))
		}
	})
	scope := "crash/" + suffix
	base := workerConfig{DSN: dsn, Scope: scope, Ledger: d.ledger, Fence: d.fence, Deadline: 30 * time.Second}

	outcomes := make([]crashOutcome, runs)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range runs {
		rng := mrand.New(mrand.NewPCG(seed, uint64(i)))
		s := crashSchedule{run: i, key: fmt.Sprintf("k%d", i), first: crashPoints[i%len(crashPoints)]}
		s.delay = killDelay(rng)
		s.recovery = [...]string{"retry", "reconcile", "race"}[(i/len(crashPoints))%3]
		if rng.IntN(4) == 0 {
			s.second = crashPoints[rng.IntN(len(crashPoints))]
			s.delay2 = killDelay(rng)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			outcomes[i] = crashRun(p, d, base, s)
			outcomes[i].took = time.Since(t0)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	took := make([]time.Duration, runs)
	for i, o := range outcomes {
		took[i] = o.took
	}
	slices.Sort(took)

	// Per-phase counts.
	type counts struct{ runs, reached, failed int }
	perPoint := map[string]*counts{}
	detail := map[string]int{}
	seconds := map[string]int{} // second kills, by point
	for _, o := range outcomes {
		c := perPoint[o.sched.first]
		if c == nil {
			c = &counts{}
			perPoint[o.sched.first] = c
		}
		c.runs++
		if o.reached {
			c.reached++
		}
		if len(o.errs) > 0 {
			c.failed++
		}
		if o.sched.second != "" {
			seconds[o.sched.second]++
		}
		detail[fmt.Sprintf("%-16s %-9s at kill %-12s -> %s", o.sched.first, o.sched.recovery, o.stateAtKill, o.recovered)]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs in %v (%d in parallel), seed %d; a run takes %v (median), %v (max)\n", runs,
		elapsed.Round(time.Millisecond), parallel, seed, took[runs/2].Round(time.Millisecond), took[runs-1].Round(time.Millisecond))
	fmt.Fprintf(&b, "  %-16s %5s %8s %7s %12s\n", "killed at", "runs", "reached", "failed", "2nd kills")
	for _, pt := range crashPoints {
		if c := perPoint[pt]; c != nil {
			fmt.Fprintf(&b, "  %-16s %5d %8d %7d %12d\n", pt, c.runs, c.reached, c.failed, seconds[pt])
		}
	}
	keys := make([]string, 0, len(detail))
	for k := range detail {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("  point / recovery / record state+ledger rows right after the first kill -> how the last worker got its answer (count):\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "    %s  (%d)\n", k, detail[k])
	}
	t.Log(b.String())
	failed := 0
	for _, o := range outcomes {
		if len(o.errs) == 0 {
			continue
		}
		if failed++; failed <= 20 {
			t.Errorf("%v:\n\t%s", o.sched, strings.Join(o.errs, "\n\t"))
		}
	}
	if failed > 20 {
		t.Errorf("... and %d more failed runs (%d in all)", failed-20, failed)
	}
}

// killDelay is how long after an in-flight announcement the parent kills:
// at once half of the time, else up to 300us (a loopback round trip).
func killDelay(rng *mrand.Rand) time.Duration {
	if rng.IntN(2) == 0 {
		return 0
	}
	return time.Duration(rng.IntN(300)) * time.Microsecond
}

// crashRun runs one schedule and checks its request.
func crashRun(p *pgxpool.Pool, d downstream, base workerConfig, s crashSchedule) (o crashOutcome) {
	o.sched = s
	fail := func(format string, args ...any) { o.errs = append(o.errs, fmt.Sprintf(format, args...)) }
	ctx := context.Background()
	cfg := base
	cfg.Operation = fmt.Sprintf("Crash.Charge.%d", s.run) // one per run: the reconciler touches only this run's record
	cfg.Key = s.key
	id := runtime.Identity{Scope: cfg.Scope, Operation: cfg.Operation, Key: cfg.Key}
	store := pgstore.New(p)

	var transcripts []string
	defer func() {
		if len(o.errs) > 0 || os.Getenv("IDEM_CRASH_VERBOSE") != "" {
			o.errs = append(o.errs, "transcripts:\n\t"+strings.Join(transcripts, "\n\t"))
		}
	}()
	kill := func(point string, delay time.Duration) (bool, bool) {
		c := cfg
		c.Stop, c.Lease, c.MaxWait = point, 150*time.Millisecond, 10*time.Second
		w, err := startWorker(c)
		if err != nil {
			fail("starting a worker: %v", err)
			return false, false
		}
		if !inFlight(point) {
			delay = 0
		}
		reached, err := w.killAt(point, delay)
		transcripts = append(transcripts, fmt.Sprintf("worker killed at %s (reached %v):\n\t\t%s", point, reached, w.transcript()))
		if err != nil && reached {
			fail("killing the worker: %v", err)
			return reached, false
		}
		// A worker that ends before its kill point must have succeeded, or
		// refused to start its effect because its claim's reply came too
		// late to trust the lease (a loaded machine): nothing ran, and the
		// rest of the run checks the same invariants.
		if !reached && !strings.HasPrefix(w.result(), "ok ") && !strings.Contains(w.transcript(), "the effect did not run") {
			fail("the worker to be killed at %s ended by itself without success: %q (%v)", point, w.result(), err)
		}
		return reached, true
	}

	reached, ok := kill(s.first, s.delay)
	o.reached = reached
	if !ok {
		return o
	}
	if rec, err := store.Get(ctx, id); errors.Is(err, runtime.ErrNotFound) {
		o.stateAtKill = "absent"
	} else if err != nil {
		fail("get: %v", err)
		return o
	} else {
		o.stateAtKill = string(rec.State)
	}
	if cs, err := d.charges(ctx, runtime.DownstreamKey(id)); err != nil {
		fail("reading the ledger: %v", err)
		return o
	} else {
		o.stateAtKill += fmt.Sprintf("+%d", len(cs))
	}
	if s.second != "" {
		if _, ok := kill(s.second, s.delay2); !ok {
			return o
		}
	}

	if s.recovery == "reconcile" {
		t0 := time.Now()
		err := reconcileUntilSettled(ctx, p, d, id)
		transcripts = append(transcripts, fmt.Sprintf("reconciler: %v (%v)", time.Since(t0).Round(time.Millisecond), err))
		if err != nil {
			fail("reconciler: %v", err)
		}
	}

	var raced chan error
	if s.recovery == "race" { // the reconciler converges while the last worker retries
		raced = make(chan error, 1)
		go func() { raced <- reconcileUntilSettled(ctx, p, d, id) }()
	}
	c := cfg
	c.Lease, c.MaxWait = 10*time.Second, 10*time.Second
	w, err := startWorker(c)
	if err != nil {
		fail("starting the last worker: %v", err)
		return o
	}
	werr := w.finish()
	if raced != nil {
		if err := <-raced; err != nil {
			fail("reconciler: %v", err)
		}
	}
	transcripts = append(transcripts, "last worker:\n\t\t"+w.transcript())
	var evs []string
	for _, l := range w.out {
		if e, ok := strings.CutPrefix(l, "EVENTS "); ok {
			evs = append(evs, e)
		}
	}
	o.recovered = strings.Join(evs, " / ")
	res := w.result()
	var got crashReceipt
	if r, ok := strings.CutPrefix(res, "ok "); !ok || werr != nil {
		fail("the last worker did not succeed: result %q (%v)", res, werr)
	} else if err := json.Unmarshal([]byte(r), &got); err != nil {
		fail("the last worker's response %q: %v", r, err)
	}

	// Invariants: one ledger row; the record is SUCCESS and holds that
	// row; the client was told that row.
	charges, err := d.charges(ctx, runtime.DownstreamKey(id))
	if err != nil {
		fail("reading the ledger: %v", err)
		return o
	}
	if len(charges) != 1 {
		fail("%d ledger rows for the request, want exactly 1: %+v", len(charges), charges)
	}
	rec, err := store.Get(ctx, id)
	if err != nil {
		fail("the record: %v", err)
		return o
	}
	if rec.State != runtime.StateSuccess {
		fail("the record is %s (version %d, owner %q), want SUCCESS", rec.State, rec.Version, rec.Owner)
		return o
	}
	var stored crashReceipt
	if err := json.Unmarshal(rec.Response, &stored); err != nil {
		fail("the stored response %q: %v", rec.Response, err)
	}
	if len(charges) > 0 && (stored != charges[0] || got != charges[0]) {
		fail("ledger has %+v, the record holds %+v, the client was told %+v", charges[0], stored, got)
	}
	return o
}

// reconcileUntilSettled runs a reconciler of the run's operation until its
// record is SUCCESS, FAILED or released (waiting for a dead worker's lease to
// expire), bounded by workerTimeout.
func reconcileUntilSettled(ctx context.Context, p *pgxpool.Pool, d downstream, id runtime.Identity) error {
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		return err
	}
	if err := runtime.Register(rt, id.Operation, d.find, runtime.QueryOptions{}); err != nil {
		return err
	}
	rec, err := runtime.NewReconciler(rt, runtime.ReconcileBackoff(10*time.Millisecond, 50*time.Millisecond),
		runtime.ReconcileLease(10*time.Second))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(workerTimeout)
	for {
		if _, err := rec.RunOnce(ctx); err != nil {
			return err
		}
		r, err := rt.Store().Get(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) || (err == nil && r.State.Final()) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("record still %s after %v", r.State, workerTimeout)
		}
		time.Sleep(20 * time.Millisecond) // the dead worker's lease (150ms) runs out
	}
}
