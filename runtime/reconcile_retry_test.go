package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// lostCutReply refuses responses over limit with ErrTooLarge before it looks
// at the write (as the simulation's LimitStore does, and a store that checks
// sizes first may), and loses the reply of the first write it applies.
type lostCutReply struct {
	runtime.Store
	limit int

	mu     sync.Mutex
	lost   bool
	writes []runtime.TransitionParams
	big    int
}

func (s *lostCutReply) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	s.mu.Lock()
	s.writes = append(s.writes, p)
	if len(p.Response) > s.limit {
		s.big++
		s.mu.Unlock()
		return 0, runtime.ErrTooLarge
	}
	lose := !s.lost
	s.lost = true
	s.mu.Unlock()
	v, err := s.Store.Transition(ctx, p)
	if lose && err == nil {
		return 0, errors.New("connection reset: the reply was lost")
	}
	return v, err
}

// cutAnswer is a query's answer too large for lostCutReply, with a short
// form that fits.
type cutAnswer struct{ Blob string }

func (c cutAnswer) Cut() cutAnswer { return cutAnswer{Blob: c.Blob[:8]} }

// The reconciler retries its answer's write through a lost reply by
// resending the write that was applied (the store knows it by its token), as
// a call's completion does. It used to start each try from the query's
// whole answer: the store refused it as too large again before it could
// recognise the token, and the model check's history (TestModelAcceptsReferenceStore,
// seed 4) read a write with an applied token refused as too large: not
// linearizable, one run in two.
func TestReconcilerRetryResendsTheWriteApplied(t *testing.T) {
	st := &lostCutReply{Store: memstore.New(), limit: 64}
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	const op = "reconcile.retry-cut"
	r24unknown(t, rt, op, "k")
	if err := runtime.Register(rt, op, func(context.Context, string) (cutAnswer, runtime.Outcome, error) {
		return cutAnswer{Blob: strings.Repeat("x", 200)}, runtime.OutcomeSucceeded, nil
	}, runtime.QueryOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := runtime.NewReconciler(rt)
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.writes, st.big, st.lost = nil, 0, false // r24unknown's own write is not the reconciler's
	st.mu.Unlock()
	s, err := rc.RunOnce(context.Background())
	if err != nil || s.Succeeded != 1 {
		t.Fatalf("pass: %+v, %v; want one record converged", s, err)
	}
	rec, err := st.Get(context.Background(), runtime.Identity{Operation: op, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != runtime.StateSuccess || string(rec.Response) != `{"Blob":"xxxxxxxx"}` {
		t.Fatalf("record: %s %s; want SUCCESS with the short form", rec.State, rec.Response)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.big != 1 || len(st.writes) != 3 {
		for i, w := range st.writes {
			t.Logf("write %d: token %s, %d bytes", i, w.Token, len(w.Response))
		}
		t.Fatalf("%d writes, %d refused as too large; want 3 and 1 (the whole answer refused once, its short form applied with its reply lost, then the same write again)", len(st.writes), st.big)
	}
}
