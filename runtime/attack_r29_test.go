package runtime_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
)

// Row 25.40 (a): "a duplicate's inline query that could not tell wrote
// UNKNOWN with no note, erasing the note of a record the reconciler had
// given up on ... it now writes the note of the record it asked under".
// Schedule: the record is given up on (ReconcileMaxAttempts 1, note set).
// A duplicate acquires it for an inline query; its query (or an observer of
// the claim phase, the caller's code on the call's goroutine) calls
// runtime.Goexit, which a query that cannot tell amounts to (the
// reconciler treats it so: row 25.36). The call leaves through leaveHeld,
// which writes UNKNOWN with no note: the give-up mark is erased, attempts
// stay used, no reconciler writes it again.
func TestR29InlineGoexitErasesGaveUpNote(t *testing.T) {
	for _, where := range []string{"query", "claim-observer"} {
		for _, sx := range teststores.All() {
			t.Run(where+"/"+sx.Name, func(t *testing.T) { r29InlineGoexitErasesGaveUpNote(t, sx.New(t), where) })
		}
	}
}

func r29InlineGoexitErasesGaveUpNote(t *testing.T, st idem.Store, where string) {
	key := teststores.Unique()
	var arm atomic.Bool
	obs := idem.ObserverFunc(func(ctx context.Context, e idem.Event) {
		if where == "claim-observer" && arm.Load() && e.Kind == idem.EventPhase && e.Phase == idem.PhaseClaim {
			runtime.Goexit()
		}
	})
	rt, err := idem.New(st, idem.WithLease(200*time.Millisecond), idem.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r29.gaveup"
	cannotTell := func(ctx context.Context, req string) (int, idem.Outcome, error) {
		if where == "query" && arm.Load() {
			runtime.Goexit()
		}
		return 0, idem.OutcomeUnknown, errors.New("r29: downstream: 503")
	}
	if err := idem.Register(rt, op, cannotTell, idem.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	call := idem.Call[string, int]{Operation: op, Key: key, Request: "r", Query: cannotTell,
		Effect: func(ctx context.Context, req string) (int, error) { return 0, context.DeadlineExceeded }}
	ctx := context.Background()
	if _, err := idem.Do(ctx, rt, call); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
	}
	rec, err := idem.NewReconciler(rt, idem.ReconcileMaxAttempts(1), idem.ReconcileBackoff(10*time.Millisecond, 10*time.Millisecond), idem.ReconcileLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := rec.RunOnce(ctx)
	if err != nil || stats.GaveUp != 1 {
		t.Fatalf("reconcile: %+v, %v; want one record given up on", stats, err)
	}
	id := idem.Identity{Operation: op, Key: key}
	before, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if before.Note == "" {
		t.Fatalf("the record given up on has no note to begin with")
	}
	time.Sleep(50 * time.Millisecond) // the hold-off passes
	arm.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := idem.Do(ctx, rt, call)
		t.Logf("duplicate returned: %v", err)
	}()
	<-done
	arm.Store(false)
	after, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: state %s attempts %d note %q; after the duplicate (Goexit in its %s): state %s attempts %d note %q",
		before.State, before.Attempts, before.Note, where, after.State, after.Attempts, after.Note)
	if after.State == idem.StateUnknown && after.Attempts >= 1 && after.Note == "" {
		t.Fatalf("the record the reconciler gave up on (note %q) lost its note when a duplicate's inline query ended without an answer (Goexit in the %s); it stays UNKNOWN, attempts %d, and no reconciler writes it again", before.Note, where, after.Attempts)
	}
}

// NoQueryPolicy: "so that they do not stay UNKNOWN forever. Until After has
// passed since the record was claimed it stays UNKNOWN ...; then the
// reconciler resolves it as Resolve says." ReconcileMaxAttempts: "after how
// many inconclusive queries a record is given up on" (a no-query record has
// no query). Schedule: ReconcileMaxAttempts(1); a no-query operation's
// record goes UNKNOWN; the reconciler's pass before After acquires it (its
// one attempt) and holds it until After; after After no pass acquires it
// again (attempts 1, not below the maximum): it stays UNKNOWN for good,
// neither resolved by its policy nor given up on (no EventReconcileGaveUp,
// no GaveUp count, its note says it will be resolved by policy).
func TestR29HeldNoQueryPastMaxAttempts(t *testing.T) {
	for _, sx := range teststores.All() {
		t.Run(sx.Name, func(t *testing.T) { r29NoQueryHoldUsesLastAttempt(t, sx.New(t)) })
	}
}

func r29NoQueryHoldUsesLastAttempt(t *testing.T, st idem.Store) {
	key := teststores.Unique()
	var gaveUp atomic.Int32
	obs := idem.ObserverFunc(func(ctx context.Context, e idem.Event) {
		if e.Kind == idem.EventReconcileGaveUp {
			gaveUp.Add(1)
		}
	})
	rt, err := idem.New(st, idem.WithLease(200*time.Millisecond), idem.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	const op = "r29.noquery"
	if err := idem.RegisterNoQuery(rt, op, idem.NoQueryPolicy{After: 300 * time.Millisecond, Resolve: idem.NotHappenedRelease}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := idem.Call[string, int]{Operation: op, Key: key, Request: "r",
		Effect: func(ctx context.Context, req string) (int, error) { return 0, context.DeadlineExceeded }}
	if _, err := idem.Do(ctx, rt, call); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
	}
	rec, err := idem.NewReconciler(rt, idem.ReconcileMaxAttempts(1), idem.ReconcileLease(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s1, err := rec.RunOnce(ctx)
	t.Logf("pass before After: %+v, %v", s1, err)
	time.Sleep(500 * time.Millisecond)
	var total idem.ReconcileStats
	for i := 0; i < 3; i++ {
		s, err := rec.RunOnce(ctx)
		t.Logf("pass after After: %+v, %v", s, err)
		total.Acquired += s.Acquired
		total.Released += s.Released
		total.GaveUp += s.GaveUp
		time.Sleep(50 * time.Millisecond)
	}
	r, gerr := st.Get(ctx, idem.Identity{Operation: op, Key: key})
	t.Logf("record: %v state %s attempts %d note %q; gave-up events %d", gerr, r.State, r.Attempts, r.Note, gaveUp.Load())
	if gerr == nil && r.State == idem.StateUnknown && gaveUp.Load() == 0 && s1.GaveUp == 0 && total.GaveUp == 0 {
		t.Fatalf("the no-query record stays UNKNOWN past its policy's After (attempts %d of 1 used by the hold), never resolved by the policy nor reported as given up on; note %q", r.Attempts, r.Note)
	}
}
