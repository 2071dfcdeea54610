package pgstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// The takeover's compare-and-set checks the lease again: a claim that read
// an expired PROCESSING record, whose owner then renewed its lease (same
// version, live again) before the takeover's statement, takes nothing.
func TestTakeoverRechecksTheLease(t *testing.T) {
	p := testPool(t)
	ctx := scopedCtx(t.Name())
	for _, order := range []int{1, -1} { // read first, insert first
		s := pgstore.New(p)
		pgstore.SetClaimOrder(s, order)
		id, err := runtime.NewIdentity(ctx, "T.Recheck", "k"+time.Now().Format("150405.000000000"))
		if err != nil {
			t.Fatal(err)
		}
		fp := runtime.Fingerprint([]byte(`{}`))
		first, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: []byte(`{}`), Owner: "w1", Lease: 100 * time.Millisecond})
		if err != nil || !first.Claimed {
			t.Fatalf("first claim: %+v, %v", first, err)
		}
		time.Sleep(250 * time.Millisecond) // the lease has expired
		renewed := false
		pgstore.SetBeforeTakeover(s, func() {
			if renewed {
				return
			}
			renewed = true
			if _, err := s.Renew(ctx, runtime.RenewParams{ID: id, State: runtime.StateProcessing, Owner: "w1", Version: first.Record.Version, Lease: 10 * time.Second}); err != nil {
				t.Errorf("the owner's renewal: %v", err)
			}
		})
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: []byte(`{}`), Owner: "w2", Lease: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !renewed {
			t.Fatalf("order %d: the claim never tried to take over", order)
		}
		if res.Claimed || res.Record.Owner != "w1" {
			t.Fatalf("order %d: took over a lease its owner renewed after the read: %+v", order, res)
		}
	}
}
