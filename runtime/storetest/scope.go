package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/runtime"
)

// tenantLedger is a tenant-scoped downstream: it files each charge under
// the scope of the effect's context and the account, and its query looks a
// charge up the same way, so a query that is not told the handler's scope
// looks under the wrong tenant and answers "not happened".
type tenantLedger struct {
	mu      sync.Mutex
	charges map[[2]string]receipt
	runs    atomic.Int32
	scopes  []string // the scopes the query saw
}

func (l *tenantLedger) charge(ctx context.Context, r chargeReq) (receipt, error) {
	n := l.runs.Add(1)
	rc := receipt{ID: fmt.Sprintf("ch_%d", n), Amount: r.Amount}
	l.mu.Lock()
	l.charges[[2]string{runtime.ScopeFrom(ctx), r.Account}] = rc
	l.mu.Unlock()
	return rc, nil
}

func (l *tenantLedger) find(ctx context.Context, r chargeReq) (receipt, runtime.Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	scope := runtime.ScopeFrom(ctx)
	l.scopes = append(l.scopes, scope)
	if rc, ok := l.charges[[2]string{scope, r.Account}]; ok {
		return rc, runtime.OutcomeSucceeded, nil
	}
	return receipt{}, runtime.OutcomeNotHappened, nil
}

// testQueryScope: every query (inline and the reconciler's) runs in the
// scope the effect ran in, so a tenant-scoped downstream finds the charge
// and the retry replays it instead of charging again.
func testQueryScope(t *testing.T, s runtime.Store) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			scope := uniqueScope(t)
			ctx := runtime.WithScope(context.Background(), scope)
			op := "Payments.Charge." + uniqueScope(t)
			l := &tenantLedger{charges: map[[2]string]receipt{}}
			rt := newRuntime(t, s)
			call := runtime.Call[chargeReq, receipt]{Operation: op, Key: "k", Request: chargeReq{"acct", 7}}
			if inline {
				call.Query = l.find
			}
			first := call
			first.Effect = func(ctx context.Context, r chargeReq) (receipt, error) {
				if _, err := l.charge(ctx, r); err != nil {
					return receipt{}, err
				}
				return timesOut(ctx, r)
			}
			if _, err := runtime.Do(ctx, rt, first); !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("first call: %v", err)
			}
			if !inline {
				rrt := newRuntime(t, s)
				if err := runtime.Register(rrt, op, l.find, runtime.QueryOptions{}); err != nil {
					t.Fatal(err)
				}
				st, err := newReconciler(t, rrt).RunOnce(context.Background())
				if err != nil || st.Succeeded != 1 {
					t.Fatalf("reconcile: %+v, %v (the query saw scopes %q, the effect ran in %q)", st, err, l.scopes, scope)
				}
			}
			retry := call
			retry.Effect = l.charge
			got, err := runtime.Do(ctx, rt, retry)
			if err != nil || got.ID != "ch_1" || l.runs.Load() != 1 {
				t.Fatalf("retry: %+v, %v (runs %d; the query saw scopes %q, the effect ran in %q)", got, err, l.runs.Load(), l.scopes, scope)
			}
			for _, sc := range l.scopes {
				if sc != scope {
					t.Fatalf("a query saw scope %q, the effect %q", sc, scope)
				}
			}
		})
	}
}
