package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
)

// testList checks [runtime.Lister]: filters, identity order and paging.
func testList(t *testing.T, s runtime.Store) {
	l, ok := s.(runtime.Lister)
	if !ok {
		t.Fatalf("%T does not implement runtime.Lister", s)
	}
	ctx := context.Background()
	scope := uniqueScope(t)
	// Operations of this test only: AcquirePending works store-wide.
	op := func(name string) string { return name + "." + scope }
	id := func(name, key string) runtime.Identity {
		return runtime.Identity{Scope: scope, Operation: op(name), Key: key}
	}
	claim := func(i runtime.Identity, lease time.Duration) runtime.Record {
		t.Helper()
		return mustClaim(t, s, runtime.ClaimParams{ID: i, Fingerprint: []byte("fp"), Owner: "w", Lease: lease})
	}
	// live PROCESSING, expired PROCESSING, UNKNOWN, UNKNOWN acquired 2x, SUCCESS.
	claim(id("A", "live"), longLease)
	claim(id("A", "dead"), 10*time.Millisecond)
	r := claim(id("B", "unknown"), longLease)
	finish(t, s, r, runtime.StateUnknown, 0)
	r = claim(id("D", "tried"), longLease)
	finish(t, s, r, runtime.StateUnknown, 0)
	for range 2 {
		recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "rec", Lease: 10 * time.Millisecond, Limit: 100, Operations: []string{op("D")}})
		if err != nil || len(recs) != 1 {
			t.Fatalf("acquire: %d records, %v", len(recs), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r = claim(id("C", "done"), longLease)
	finish(t, s, r, runtime.StateSuccess, time.Hour)
	time.Sleep(20 * time.Millisecond)

	keys := func(p runtime.ListParams) []string {
		t.Helper()
		p.Scope = &scope
		recs, err := l.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ID.Operation[:1]+"/"+r.ID.Key)
			// Every record listed is one the parameters match, and its
			// lease is the one Get answers (an operator's list and show
			// never disagree: review r39 found pgstore's List answering a
			// void DoTx claim's stored lease as held).
			if !p.Matches(&r) {
				t.Errorf("%+v: listed %v (state %s, lease until %v, store now %v), which the parameters do not match", p, r.ID, r.State, r.LeaseExpiresAt, r.StoreNow)
			}
			if g, err := s.Get(ctx, r.ID); err == nil && g.LeaseLive() != r.LeaseLive() {
				t.Errorf("%v: List says the lease is live %v (until %v), Get %v (until %v)", r.ID, r.LeaseLive(), r.LeaseExpiresAt, g.LeaseLive(), g.LeaseExpiresAt)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		p    runtime.ListParams
		want []string
	}{
		{"default states", runtime.ListParams{}, []string{"A/dead", "A/live", "B/unknown", "D/tried"}},
		{"success", runtime.ListParams{States: []runtime.State{runtime.StateSuccess}}, []string{"C/done"}},
		{"lease free", runtime.ListParams{LeaseFree: true}, []string{"A/dead", "B/unknown", "D/tried"}},
		{"operation", runtime.ListParams{Operation: op("B")}, []string{"B/unknown"}},
		{"min attempts", runtime.ListParams{MinAttempts: 2}, []string{"D/tried"}},
		{"older than", runtime.ListParams{OlderThan: time.Hour}, nil},
		{"limit", runtime.ListParams{Limit: 2}, []string{"A/dead", "A/live"}},
		{"after", runtime.ListParams{After: &runtime.Identity{Scope: scope, Operation: op("A"), Key: "live"}}, []string{"B/unknown", "D/tried"}},
	} {
		if got := keys(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
	}
}
