package runtime_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type ChargeRequest struct {
	Account string
	Cents   int64
}

type Receipt struct {
	ChargeID string
}

func ExampleDo() {
	rt, _ := runtime.New(memstore.New())
	ctx := runtime.WithScope(context.Background(), "tenant-42")
	charges := 0
	charge := func(ctx context.Context, r ChargeRequest) (Receipt, error) {
		charges++
		return Receipt{ChargeID: fmt.Sprintf("ch_%d", charges)}, nil
	}
	for range 3 { // the client retries
		rc, err := runtime.Do(ctx, rt, runtime.Call[ChargeRequest, Receipt]{
			Operation: "Payments.Charge",
			Key:       "9f1c2a7e", // from the Idempotency-Key header
			Request:   ChargeRequest{Account: "acct_1", Cents: 1999},
			Effect:    charge,
		})
		fmt.Println(rc.ChargeID, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// ch_1 <nil>
	// ch_1 <nil>
	// ch_1 <nil>
	// charges: 1
}

func ExampleReconciler() {
	store := memstore.New()
	ctx := context.Background()

	// A call times out: the gateway charged the card, but the answer was lost.
	charged := map[string]bool{}
	serving, _ := runtime.New(store)
	_, err := runtime.Do(ctx, serving, runtime.Call[ChargeRequest, Receipt]{
		Operation: "Payments.Charge", Key: "k1", Request: ChargeRequest{"acct_1", 500},
		Effect: func(ctx context.Context, r ChargeRequest) (Receipt, error) {
			dk, _ := runtime.DownstreamKeyFrom(ctx) // sent to the gateway as its idempotency key
			charged[dk] = true
			return Receipt{}, context.DeadlineExceeded
		},
	})
	fmt.Println(errors.Is(err, runtime.ErrOutcomeUnknown))

	// Another process registers the operation's query and reconciles.
	recon, _ := runtime.New(store)
	_ = runtime.Register(recon, "Payments.Charge", func(ctx context.Context, r ChargeRequest) (Receipt, runtime.Outcome, error) {
		dk, _ := runtime.DownstreamKeyFrom(ctx)
		if charged[dk] {
			return Receipt{ChargeID: "ch_found"}, runtime.OutcomeSucceeded, nil
		}
		return Receipt{}, runtime.OutcomeNotHappened, nil
	}, runtime.QueryOptions{})
	r, _ := runtime.NewReconciler(recon)
	st, _ := r.RunOnce(ctx)
	fmt.Printf("acquired %d, succeeded %d\n", st.Acquired, st.Succeeded)

	// The client's retry is answered from the converged record.
	rc, err := runtime.Do(ctx, serving, runtime.Call[ChargeRequest, Receipt]{
		Operation: "Payments.Charge", Key: "k1", Request: ChargeRequest{"acct_1", 500},
		Effect: func(context.Context, ChargeRequest) (Receipt, error) { panic("never runs again") },
	})
	fmt.Println(rc.ChargeID, err)
	// Output:
	// true
	// acquired 1, succeeded 1
	// ch_found <nil>
}

func ExampleSweeper() {
	rt, _ := runtime.New(memstore.New())
	sw, _ := runtime.NewSweeper(rt, runtime.SweepBatch(500))
	n, err := sw.RunOnce(context.Background()) // or go sw.Run(ctx) in a long-running process
	fmt.Println(n, err)
	// Output:
	// 0 <nil>
}
