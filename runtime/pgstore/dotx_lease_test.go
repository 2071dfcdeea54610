package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/overlap"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestDoTxLeaseRule: DoTx keeps the runtime's lease rule. A DoTx call
// whose store stops answering its renewals (or refuses them, or applies one
// and answers it late) must stop its effect before its lease can expire:
// a duplicate through runtime.Do takes the record over once it expires,
// and the two effects must never run at once. A call whose store keeps
// answering keeps its lease however its renewals are delayed. One row
// commits in every case.
func TestDoTxLeaseRule(t *testing.T) {
	const lease = 600 * time.Millisecond
	hang := func(ctx context.Context) (time.Time, error) {
		<-ctx.Done()
		return time.Time{}, fmt.Errorf("renew: %w", ctx.Err())
	}
	refused := errors.New("renew: connection refused")
	tests := []struct {
		name  string
		renew func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error)
		keeps bool // the DoTx call keeps its lease and commits
	}{
		{"one renewal times out", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			if n == 1 {
				return hang(ctx)
			}
			return renew()
		}, true},
		{"every renewal takes a third of the lease", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			select {
			case <-time.After(lease / 3):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
			return renew()
		}, true},
		{"the store never answers renewals", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			return hang(ctx)
		}, false},
		{"the store refuses every renewal", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			return time.Time{}, refused
		}, false},
		{"a renewal is applied and its reply comes late, then none answers", func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error) {
			if n > 1 {
				return hang(ctx)
			}
			exp, err := renew()
			select {
			case <-time.After(lease * 45 / 100):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
			return exp, err
		}, false},
	}
	p := testPool(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table := ordersTable(t, p)
			faulty := pgstore.New(p)
			pgstore.SetRenewHook(faulty, tc.renew)
			first, err := runtime.New(faulty, runtime.WithLease(lease), runtime.WithOwner("dotx"))
			if err != nil {
				t.Fatal(err)
			}
			dup, err := runtime.New(pgstore.New(p), runtime.WithLease(lease), runtime.WithOwner("duplicate"), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			req := orderReq{OrderID: "o-1", Amount: 7}
			var effects overlap.Effects
			done := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				done <- pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					_, err := pgstore.DoTx(ctx, first, tx, pgstore.TxCall[orderReq, order]{
						Operation: "Orders.Create", Key: "k", Request: req,
						Effect: func(ctx context.Context, tx pgx.Tx, r orderReq) (order, error) {
							close(started)
							if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2)", r.OrderID, r.Amount); err != nil {
								return order{}, err
							}
							return order{Ref: r.OrderID, Amount: r.Amount}, effects.Run(ctx, 3*lease)
						},
					})
					return err
				})
			}()
			dupEffect := func(ctx context.Context, r orderReq) (order, error) {
				if err := effects.Run(ctx, 0); err != nil {
					return order{}, err
				}
				_, err := p.Exec(ctx, "INSERT INTO "+table+" (ref, amount) VALUES ($1, $2)", r.OrderID, r.Amount)
				return order{Ref: r.OrderID, Amount: r.Amount}, err
			}
			select {
			case <-started: // the duplicates start once DoTx holds the claim
			case err := <-done:
				t.Fatalf("DoTx returned before its effect started: %v", err)
			}
			var firstErr error
			var dupErrs []error
		poll:
			for {
				select {
				case firstErr = <-done:
					break poll
				case <-time.After(20 * time.Millisecond):
					_, err := runtime.Do(ctx, dup, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req, Effect: dupEffect})
					if err != nil && !errors.Is(err, runtime.ErrInProgress) {
						dupErrs = append(dupErrs, err)
					}
				}
			}
			// Once the DoTx call has returned, a duplicate gets the outcome.
			if _, err := runtime.Do(ctx, dup, runtime.Call[orderReq, order]{Operation: "Orders.Create", Key: "k", Request: req, Effect: dupEffect}); err != nil {
				t.Fatalf("a duplicate after the DoTx call returned: %v", err)
			}
			ran, overlaps := effects.Counts()
			if overlaps > 0 {
				t.Fatalf("two owners ran the effect at once (%d effects; DoTx: %v; duplicates: %v)", ran, firstErr, dupErrs)
			}
			if n := count(t, p, "SELECT count(*) FROM "+table); n != 1 {
				t.Fatalf("%d orders committed, want 1 (DoTx: %v; duplicates: %v)", n, firstErr, dupErrs)
			}
			if tc.keeps {
				if firstErr != nil || ran != 1 {
					t.Fatalf("the DoTx call lost a lease its store kept answering for: %v (%d effects; duplicates: %v)", firstErr, ran, dupErrs)
				}
				return
			}
			if !errors.Is(firstErr, runtime.ErrLeaseLost) {
				t.Fatalf("DoTx: %v, want its effect stopped with ErrLeaseLost", firstErr)
			}
		})
	}
}
