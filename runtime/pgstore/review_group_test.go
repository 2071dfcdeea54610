package pgstore_test

// Adversarial review (h9): group commit with concurrent duplicates that
// carry two payloads under one key, while other batches fail.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise: one effect per identity; a call whose claim found another
// fingerprint gets ErrKeyReused; no call gets another payload's response;
// a failed batch is rerun statement by statement, every caller getting its
// own result. Schedule: per round, 24 concurrent runtime.Do calls on one
// key, alternating two payloads, on a store with WithGroupCommit(8), while
// claims PostgreSQL refuses (a scope that is not UTF-8, sent to the store
// directly) make batches fail.
func TestReviewGroupCommitTwoPayloadsOneKey(t *testing.T) {
	p := testPool(t)
	s := pgstore.New(p, pgstore.WithGroupCommit(8))
	rt, err := runtime.New(s, runtime.WithMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	stop := make(chan struct{})
	var breakers sync.WaitGroup
	for g := range 2 {
		breakers.Add(1)
		go func() {
			defer breakers.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.Claim(context.Background(), runtime.ClaimParams{ID: runtime.Identity{Scope: "bad\xff", Operation: "Review.G", Key: fmt.Sprint(g, "-", i)},
					Fingerprint: []byte("fp"), Owner: "breaker", Lease: time.Minute})
			}
		}()
	}
	defer func() { close(stop); breakers.Wait() }()

	const rounds, callers = 8, 24
	for r := range rounds {
		key := fmt.Sprint("k", r)
		var effects atomic.Int32
		var winner atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				amount := 100 + c%2
				<-start
				got, err := runtime.Do(ctx, rt, runtime.Call[orderReq, order]{Operation: "Review.G", Key: key, Request: orderReq{key, amount},
					Effect: func(ctx context.Context, req orderReq) (order, error) {
						effects.Add(1)
						winner.Store(int64(req.Amount))
						time.Sleep(5 * time.Millisecond)
						return order{Ref: req.OrderID, Amount: req.Amount}, nil
					}})
				switch {
				case err == nil:
					if got.Amount != amount {
						t.Errorf("round %d caller %d (amount %d) got the response of amount %d", r, c, amount, got.Amount)
					}
				case errors.Is(err, runtime.ErrKeyReused):
				default:
					t.Errorf("round %d caller %d: %v", r, c, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := effects.Load(); n != 1 {
			t.Fatalf("round %d: effect ran %d times for one key", r, n)
		}
	}
}
