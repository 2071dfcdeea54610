package benchsvc_test

// Adversarial review of issue 17: idemgen wrappers now pass the scope as
// Call.Scope (no context is made per call) and call method values made
// once. The scope must still separate merchants everywhere: the identity,
// the replay, the effect's and the query's contexts, and the records.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/benchsvc"
)

// merchants is a Payments whose Charge records the scope it runs in, and
// whose first Charge of a key per merchant can be made to fail unclassified
// (UNKNOWN), leaving Find to converge it.
type merchants struct {
	mu       sync.Mutex
	charges  map[string]int    // merchant/key -> charges
	scopes   map[string]string // merchant/key -> scope seen by the effect
	qscopes  []string
	failOnce atomic.Bool
}

func (m *merchants) Charge(ctx context.Context, req benchsvc.ChargeRequest) (benchsvc.Receipt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := req.Merchant + "/" + req.Key
	m.charges[k]++
	m.scopes[k] = runtime.ScopeFrom(ctx)
	if m.failOnce.CompareAndSwap(true, false) {
		return benchsvc.Receipt{}, errors.New("gateway: connection reset") // charged, but who knows
	}
	return benchsvc.Receipt{ChargeID: fmt.Sprintf("ch_%s_%s", req.Merchant, req.Key), Cents: req.Cents}, nil
}

func (m *merchants) Find(ctx context.Context, req benchsvc.ChargeRequest) (benchsvc.Receipt, runtime.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.qscopes = append(m.qscopes, runtime.ScopeFrom(ctx))
	if m.charges[req.Merchant+"/"+req.Key] > 0 {
		return benchsvc.Receipt{ChargeID: fmt.Sprintf("ch_%s_%s", req.Merchant, req.Key), Cents: req.Cents}, runtime.OutcomeSucceeded, nil
	}
	return benchsvc.Receipt{}, runtime.OutcomeNotHappened, nil
}

// Promise: keys never cross scopes. Through the generated wrapper, two
// merchants using the same key each get their own charge, their own
// replay, and their effect runs in their own scope, whatever scope the
// caller's context carries; an UNKNOWN record is converged by the query in
// the merchant's scope. Schedule: on every store, merchants A and B charge
// key k concurrently (8 duplicates each) from a context scoped to a third
// tenant; then A's second key fails unclassified and its retry converges.
func TestReview17WrapperScopes(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			inner := &merchants{charges: map[string]int{}, scopes: map[string]string{}}
			svc := benchsvc.NewIdempotentPayments(inner, rt)
			u := teststores.Unique()
			a, b := "A-"+u, "B-"+u
			ctx := runtime.WithScope(context.Background(), "tenant-x-"+u)
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := a
					if i%2 == 1 {
						m = b
					}
					r, err := svc.Charge(ctx, benchsvc.ChargeRequest{Key: "k", Merchant: m, Account: "acct", Cents: 100})
					if err != nil || r.ChargeID != "ch_"+m+"_k" {
						errs <- fmt.Errorf("merchant %s: %+v, %v", m, r, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, m := range []string{a, b} {
				if n := inner.charges[m+"/k"]; n != 1 {
					t.Errorf("merchant %s charged %d times", m, n)
				}
				if s := inner.scopes[m+"/k"]; s != m {
					t.Errorf("merchant %s's effect ran in scope %q", m, s)
				}
			}
			// The same key in the caller's context scope is a third identity.
			if _, err := runtime.Do(ctx, rt, runtime.Call[benchsvc.ChargeRequest, benchsvc.Receipt]{Operation: "Payments.Charge", Key: "k",
				Request: benchsvc.ChargeRequest{Key: "k", Merchant: a, Account: "acct", Cents: 100},
				Effect: func(context.Context, benchsvc.ChargeRequest) (benchsvc.Receipt, error) {
					return benchsvc.Receipt{ChargeID: "third"}, nil
				}}); err != nil {
				t.Fatal(err)
			}
			r, err := svc.Charge(ctx, benchsvc.ChargeRequest{Key: "k", Merchant: a, Account: "acct", Cents: 100})
			if err != nil || r.ChargeID != "ch_"+a+"_k" {
				t.Errorf("merchant A's replay after a call in the context's scope: %+v, %v", r, err)
			}

			// UNKNOWN, converged by Find in the merchant's scope.
			inner.failOnce.Store(true)
			req := benchsvc.ChargeRequest{Key: "k2", Merchant: a, Account: "acct", Cents: 5}
			if _, err := svc.Charge(ctx, req); !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("unclassified failure: %v, want ErrOutcomeUnknown", err)
			}
			r, err = svc.Charge(ctx, req)
			if err != nil || r.ChargeID != "ch_"+a+"_k2" || inner.charges[a+"/k2"] != 1 {
				t.Fatalf("retry of the UNKNOWN charge: %+v, %v, charged %d times; want Find's answer, one charge", r, err, inner.charges[a+"/k2"])
			}
			inner.mu.Lock()
			qs := append([]string(nil), inner.qscopes...)
			inner.mu.Unlock()
			for _, s := range qs {
				if s != a {
					t.Errorf("Find ran in scope %q, want the merchant's %q (all: %q)", s, a, qs)
					break
				}
			}
		})
	}
}
