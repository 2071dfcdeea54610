package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise (DoTx): exactly once inside the caller's transaction; "If the
// caller rolls its transaction back after DoTx succeeded, nothing remains
// of the effect" and a transaction that commits without the SUCCESS write
// leaves a claim the next duplicate takes over. Schedule: two exactly-once
// operations composed in one transaction, the inner DoTx called from the
// outer's effect (on the savepoint tx the effect gets). The inner succeeds
// (its SUCCESS is written in the outer's savepoint), then the outer's
// effect fails (retryably, or permanently), so its savepoint rolls back
// with the inner's writes and SUCCESS; the caller commits. Each key's
// effect must then have its writes committed exactly once after the
// duplicates: the inner's duplicate must run again (nothing of it
// committed), and the outer's as the table says.
func TestH36DoTxNestedComposition(t *testing.T) {
	for _, outerErr := range []error{errors.New("retry me"), runtime.Permanent(errors.New("no"))} {
		t.Run(fmt.Sprint(outerErr), func(t *testing.T) {
			p := advSchemaPool(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := p.Exec(ctx, "CREATE TABLE h36_writes (key text, n serial)"); err != nil {
				t.Fatal(err)
			}
			rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(500*time.Millisecond), runtime.WithLease(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			scoped := runtime.WithScope(ctx, "h36")
			write := func(key string) func(context.Context, pgx.Tx, plainTxReq) (string, error) {
				return func(ctx context.Context, tx pgx.Tx, _ plainTxReq) (string, error) {
					_, err := tx.Exec(ctx, "INSERT INTO h36_writes (key) VALUES ($1)", key)
					return key, err
				}
			}
			inner := pgstore.TxCall[plainTxReq, string]{Operation: "Inner", Key: "b", Request: plainTxReq{Order: "b"}, Effect: write("b")}
			outer := pgstore.TxCall[plainTxReq, string]{Operation: "Outer", Key: "a", Request: plainTxReq{Order: "a"},
				Effect: func(ctx context.Context, tx pgx.Tx, req plainTxReq) (string, error) {
					if _, err := pgstore.DoTx(ctx, rt, tx, inner); err != nil {
						return "", fmt.Errorf("inner: %w", err)
					}
					if _, err := write("a")(ctx, tx, req); err != nil {
						return "", err
					}
					return "", outerErr
				}}
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = pgstore.DoTx(scoped, rt, tx, outer)
			t.Logf("outer DoTx: %v", err)
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			// Duplicates of the inner, each in its own transaction, then of the outer's.
			for range 2 {
				tx, err := p.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				_, derr := pgstore.DoTx(scoped, rt, tx, inner)
				if cerr := tx.Commit(ctx); cerr != nil {
					t.Fatal(cerr)
				}
				if derr != nil {
					t.Errorf("duplicate of the inner call: %v", derr)
				}
			}
			var inners, outers int
			if err := p.QueryRow(ctx, "SELECT count(*) FILTER (WHERE key = 'b'), count(*) FILTER (WHERE key = 'a') FROM h36_writes").Scan(&inners, &outers); err != nil {
				t.Fatal(err)
			}
			if inners != 1 || outers != 0 {
				t.Errorf("committed writes: inner %d, outer %d; want 1 and 0", inners, outers)
			}
			rec, err := rt.Store().Get(ctx, runtime.Identity{Scope: "h36", Operation: "Inner", Key: "b"})
			t.Logf("inner record: %v %v", rec.State, err)
		})
	}
}
