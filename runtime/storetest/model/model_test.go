package model

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden traces in testdata/")

// fullEnv selects the larger bounds whose figures docs/reliability.md
// reports (minutes, several GiB); CI runs the smaller ones.
const fullEnv = "IDEM_MODEL_FULL"

// maxStates bounds one exploration, so that a model change that makes the
// space explode fails instead of exhausting the machine.
const maxStates = 8_000_000

// checked is one configuration the checker must find clean.
type checked struct {
	name string
	c    Config
	// ci: part of the default run (with -race in CI); the rest run with
	// IDEM_MODEL_FULL=1. short: part of -short too.
	ci, short bool
}

var configs = []checked{
	// CI (with -race, under a minute on two busy cores).
	{name: "query, resolve, lost reply", ci: true, short: true, c: Config{Workers: 2, Query: true, Reconciler: true, Operator: true,
		MaxAttempts: 2, LostReplies: 1, Lives: 1}},
	{name: "no query, release, shared owner, crash + lost reply", ci: true, short: true, c: Config{Workers: 2, SharedOwner: true, Reconciler: true,
		Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "no query, fail policy, two lives, crash + lost reply", ci: true, c: Config{Workers: 2, NotHappenedFail: true, Reconciler: true, Sweeper: true,
		Crashes: 1, LostReplies: 1, Lives: 2}},
	{name: "query, network, two lives, lost reply + unanswered query", ci: true, c: Config{Workers: 2, Query: true, Network: true, Reconciler: true, Sweeper: true,
		MaxAttempts: 2, LostReplies: 1, QueryErrors: 1, Lives: 2}},
	{name: "DoTx: 1 DoTx + 1 Do, crash + lost reply", ci: true, short: true, c: Config{Workers: 2, TxWorkers: 1, Reconciler: true,
		Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "DoTx: 2 DoTx, crash + lost reply", ci: true, short: true, c: Config{Workers: 2, TxWorkers: 2, Reconciler: true,
		Crashes: 1, LostReplies: 1, Lives: 1}},

	// IDEM_MODEL_FULL=1: the figures of docs/reliability.md.
	{name: "query, resolve, crash + lost reply", c: Config{Workers: 2, Query: true, Reconciler: true, Sweeper: true, Operator: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "query, resolve, two lives, all faults", c: Config{Workers: 2, Query: true, Reconciler: true, Sweeper: true, Operator: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 1, QueryErrors: 1, Lives: 2}},
	{name: "query, resolve, two lives, all faults, shared owner", c: Config{Workers: 2, Query: true, SharedOwner: true, Reconciler: true, Sweeper: true, Operator: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 1, QueryErrors: 1, Lives: 2}},
	{name: "no query, release, resolve, two lives, shared owner", c: Config{Workers: 2, SharedOwner: true, Reconciler: true, Sweeper: true, Operator: true,
		Crashes: 1, LostReplies: 1, Lives: 2}},
	{name: "no query, fail policy, resolve, two lives", c: Config{Workers: 2, NotHappenedFail: true, Reconciler: true, Sweeper: true, Operator: true,
		Crashes: 1, LostReplies: 1, Lives: 2}},
	{name: "query, network, two lives, all faults", c: Config{Workers: 2, Query: true, Network: true, Reconciler: true, Sweeper: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 1, QueryErrors: 1, Lives: 2}},
	{name: "query, network, two lives, 2 lost replies", c: Config{Workers: 2, Query: true, Network: true, Reconciler: true, Sweeper: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 2, QueryErrors: 1, Lives: 2}},
	{name: "query, 3 workers, shared owner, crash + lost reply", c: Config{Workers: 3, Query: true, SharedOwner: true, Reconciler: true,
		MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "query, 3 workers, lost reply + unanswered query", c: Config{Workers: 3, Query: true, Reconciler: true,
		MaxAttempts: 2, LostReplies: 1, QueryErrors: 1, Lives: 1}},
	{name: "no query, 3 workers, shared owner, crash + lost reply", c: Config{Workers: 3, SharedOwner: true, Reconciler: true,
		Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "DoTx: 2 DoTx + 1 Do, crash + lost reply", c: Config{Workers: 3, TxWorkers: 2, Reconciler: true,
		Crashes: 1, LostReplies: 1, Lives: 1}},
	{name: "DoTx: 1 DoTx + 1 Do, resolve, two lives, crash + lost reply", c: Config{Workers: 2, TxWorkers: 1,
		Reconciler: true, Sweeper: true, Operator: true, Crashes: 1, LostReplies: 1, Lives: 2}},
	{name: "DoTx: 3 DoTx, shared owner, two lives, crash + lost reply", c: Config{Workers: 3, TxWorkers: 3, SharedOwner: true,
		Reconciler: true, Sweeper: true, Crashes: 1, LostReplies: 1, Lives: 2}},
}

// TestExhaustive explores every configuration to exhaustion and requires
// every invariant in every state and on every step, and the bounded
// liveness property. TestMutations shows each check can fail.
func TestExhaustive(t *testing.T) {
	full := os.Getenv(fullEnv) != ""
	var rows []string
	for _, k := range configs {
		if !full && (!k.ci || (testing.Short() && !k.short)) {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			res, err := Check(k.c, maxStates)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation != nil {
				t.Fatal(res.Violation.Format(k.c))
			}
			if res.States < 1000 || res.Depth < 10 {
				t.Fatalf("only %d states, depth %d: the model does not move", res.States, res.Depth)
			}
			t.Logf("%s: %d states, %d steps, depth %d, converges within %d fault-free steps, %v",
				k.c, res.States, res.Edges, res.Depth, res.Converge, res.Elapsed.Round(1e7))
			rows = append(rows, "| "+k.name+" | "+itoa(res.States)+" | "+itoa(res.Edges)+" | "+itoa(res.Depth)+" | "+
				itoa(res.Converge)+" | "+res.Elapsed.Round(1e8).String()+" |")
		})
	}
	t.Log("figures (docs/reliability.md):\n" + strings.Join(rows, "\n"))
}

// itoa writes n with thousands separators.
func itoa(n int) string {
	d := strconv.Itoa(n)
	var b strings.Builder
	for i := range len(d) {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(d[i])
	}
	return b.String()
}

// TestMutations breaks one guard at a time and requires the checker to find
// a counterexample, printed as a readable trace.
func TestMutations(t *testing.T) {
	two := Config{Workers: 2, Query: true, Reconciler: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}
	noQuery := Config{Workers: 2, Reconciler: true, Crashes: 1, LostReplies: 1, Lives: 1}
	network := Config{Workers: 2, Query: true, Network: true, Reconciler: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}
	shared3 := Config{Workers: 3, Query: true, SharedOwner: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}
	dotx := Config{Workers: 2, TxWorkers: 1, Reconciler: true, Crashes: 1, LostReplies: 1, Lives: 1}
	for _, tc := range []struct {
		m    Mutation
		c    Config
		want string
	}{
		{MutClaimIgnoresLease, two, "lease: two workers run the effect"},
		{MutClaimIgnoresLease, noQuery, "lease: two workers run the effect"},
		{MutAcquireIgnoresLease, two, "lease: two workers run the effect"},
		{MutNoLeaseRule, noQuery, "lease: two workers run the effect"},
		{MutNoLeaseRule, two, "lease: two workers run the effect"},
		{MutNoFencing, network, "exactly once"},
		{MutNoFencing, shared3, "exactly once"},
		{MutTransitionNoVersion, shared3, "lease: two workers run the effect"},
		{MutRenewNoCAS, shared3, "lease: two workers run the effect"},
		{MutTokenSurvivesWrites, shared3, "lease: two workers run the effect"},
		{MutTxWindow, dotx, "DoTx: a call that knew its lease live"},
		{MutClaimIgnoresLease, dotx, "lease: two workers run the effect"},
		{MutNoLeaseRule, dotx, "lease: two workers run the effect"},
	} {
		c := tc.c
		c.Mutation = tc.m
		t.Run(tc.m.String(), func(t *testing.T) {
			res, err := Check(c, maxStates)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil {
				t.Fatalf("no counterexample in %d states (%s)", res.States, c)
			}
			if !strings.Contains(res.Violation.Invariant, tc.want) {
				t.Fatalf("found %q, want %q\n%s", res.Violation.Invariant, tc.want, res.Violation.Format(c))
			}
			t.Logf("after %d states:\n%s", res.States, res.Violation.Format(c))
		})
	}
}

// TestResolveRacesRequestInFlight documents a limit the checker finds on
// the unmodified protocol: when an effect's request can still be on its
// way downstream (the network configuration), a person who resolves the
// record as FAILED after looking the downstream up can be overtaken by
// that request: the effect happens and duplicates are told FAILED. Resolve
// does not fence the downstream (it has no query to send). The docs tell
// operators to resolve only records whose attempts can no longer arrive.
func TestResolveRacesRequestInFlight(t *testing.T) {
	c := Config{Workers: 2, Query: true, Network: true, Reconciler: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}
	res, err := Check(c, maxStates)
	if err != nil {
		t.Fatal(err)
	}
	if res.Violation == nil || !strings.Contains(res.Violation.Invariant, "told FAILED for an effect that happened") {
		t.Fatalf("want the known race, got %v", res.Violation)
	}
	t.Logf("known limit, after %d states:\n%s", res.States, res.Violation.Format(c))
}

// TestLateStartOverlaps documents what the checker finds in runtime.Do as
// it is: a worker can start its effect after the time its lease was known
// to hold, renewing concurrently (the lease rule's "late round"), while
// another worker took the expired record over and runs the effect too.
// Two ways in: after a query says "did not happen", the compare-and-set to
// PROCESSING is retried (its reply lost) past the lease, and the retry
// recognises its token; or, without a query, a claim's reply arrives that
// late. With a query the downstream's fencing keeps the overlap to one
// effect; without one nothing does. With the fix the model proposes
// (ConfirmLateStart: renew before a late start) neither overlaps.
func TestLateStartOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"query, CAS retried past the lease", Config{Workers: 3, Query: true, Reconciler: true, MaxAttempts: 2, LostReplies: 1, Lives: 1, NoOverlap: true}},
		{"no query, slow claim reply", Config{Workers: 2, Reconciler: true, SlowReplies: 1, Lives: 1, NoOverlap: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			res, err := Check(c, maxStates)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil || !strings.Contains(res.Violation.Invariant, "overlap") {
				t.Fatalf("want the late-start overlap, got %v", res.Violation)
			}
			t.Logf("runtime.Do before confirmLateStart, after %d states:\n%s", res.States, res.Violation.Format(c))
			if testing.Short() && c.Workers > 2 {
				return // the fix's 155,000 states
			}
			c.ConfirmLateStart = true
			if res, err = Check(c, maxStates); err != nil {
				t.Fatal(err)
			}
			if res.Violation != nil {
				t.Fatalf("with a late start confirmed first:\n%s", res.Violation.Format(c))
			}
			t.Logf("with a late start confirmed first (runtime.Do as it is): no overlap in %d states", res.States)
		})
	}
}

// TestErrorPolicies: the checker finds why RecordUnknown is the default.
// Under RecordFailed an effect that went through but returned an
// unclassified error (a 500 after the charge) is recorded FAILED: its
// client and every duplicate are told FAILED for an effect that happened.
// Under ReleaseRecord the record is released and the retry runs the effect
// again: two effects for an operation with a query. (Timeouts and
// cancellations are UNKNOWN under every policy: the model's lost replies.)
func TestErrorPolicies(t *testing.T) {
	for _, tc := range []struct {
		p    ErrorPolicy
		want string
	}{
		{RecordFailed, "told FAILED for an effect that happened"},
		{ReleaseRecord, "exactly once"},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			c := Config{Workers: 2, Query: true, Reconciler: true, MaxAttempts: 2, Lives: 1, Policy: tc.p}
			res, err := Check(c, maxStates)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil || !strings.Contains(res.Violation.Invariant, tc.want) {
				t.Fatalf("want %q, got %v", tc.want, res.Violation)
			}
			t.Logf("after %d states:\n%s", res.States, res.Violation.Format(c))
		})
	}
}

// TestCanonical: canonicalisation is idempotent and identifies states that
// differ only by the workers' names or the versions' values.
func TestCanonical(t *testing.T) {
	c := Config{Workers: 2, Query: true, Reconciler: true, MaxAttempts: 2, Lives: 1}
	var s State = c.initial()
	s.Rec = Rec{St: Processing, Owner: 1, Ver: 7, Lease: 2, Created: 7}
	s.Counter, s.MaxSeen = 9, 3
	s.A[0] = Actor{PC: wWait}
	s.A[1] = Actor{PC: wEffect, St: Processing, Ver: 7, Known: 1}
	swapped := s
	swapped.Rec.Owner = 0
	swapped.A[0], swapped.A[1] = s.A[1], s.A[0]
	shifted := s
	shifted.Rec.Ver, shifted.Rec.Created, shifted.Counter, shifted.MaxSeen, shifted.A[1].Ver = 40, 40, 50, 20, 40
	a := canonical(s, &c)
	for _, o := range []State{swapped, shifted, a} {
		if got := canonical(o, &c); got != a {
			t.Fatalf("canonical forms differ:\n%+v\n%+v", got, a)
		}
	}
	if a.Rec.Ver != 2 || a.MaxSeen != 1 || a.Counter != 3 {
		t.Fatalf("versions not renumbered in order: %+v", a)
	}
	other := s
	other.MaxSeen = 8 // above the record's version: a different state
	if canonical(other, &c) == a {
		t.Fatal("states that differ in version order have the same canonical form")
	}
}

// TestGoldenTraces keeps two counterexamples as readable files: the
// checker's output format, and the shortest schedules it finds, are part of
// what reviewers read. Regenerate with -update.
func TestGoldenTraces(t *testing.T) {
	for _, tc := range []struct {
		file string
		c    Config
	}{
		{"no-lease-rule.trace", Config{Workers: 2, Reconciler: true, Crashes: 1, LostReplies: 1, Lives: 1, Mutation: MutNoLeaseRule}},
		{"late-start-overlap.trace", Config{Workers: 3, Query: true, Reconciler: true, MaxAttempts: 2, LostReplies: 1, Lives: 1, NoOverlap: true}},
		{"late-start-no-query.trace", Config{Workers: 2, Reconciler: true, SlowReplies: 1, Lives: 1, NoOverlap: true}},
		{"resolve-request-in-flight.trace", Config{Workers: 2, Query: true, Network: true, Reconciler: true, Operator: true, MaxAttempts: 2, Crashes: 1, LostReplies: 1, Lives: 1}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			res, err := Check(tc.c, maxStates)
			if err != nil {
				t.Fatal(err)
			}
			if res.Violation == nil {
				t.Fatal("no counterexample")
			}
			got := res.Violation.Format(tc.c)
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Fatalf("trace differs from %s (run with -update if intended):\n%s", path, got)
			}
		})
	}
}
