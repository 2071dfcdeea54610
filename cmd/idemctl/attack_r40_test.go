package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestR40ListStuckHidesFreeClaimOfRolledBackSavepoint: the caller ran DoTx
// inside a savepoint of its transaction, rolled that savepoint back (the
// effect and the SUCCESS write are gone, the row is no longer locked), and
// goes on with its transaction past the claim's lease. Nobody holds the
// record: resolve takes it, a duplicate takes it over. Yet
// `idemctl list -stuck` ("records no one holds: PROCESSING whose lease
// expired (the worker died)") leaves it out, because List's lease-free
// filter now drops every DoTx claim whose transaction is open.
func TestR40ListStuckHidesFreeClaimOfRolledBackSavepoint(t *testing.T) {
	pool, dsn := r39PG(t)
	sfx := suffix()
	scope, op := "r40/"+sfx, "R40"+sfx+".Book"
	ctx := runtime.WithScope(context.Background(), scope)
	rt, err := runtime.New(pgstore.New(pool), runtime.WithLease(time.Second), runtime.WithOwner("r40-"+sfx))
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return runFor(t, nil, append(append([]string{args[0]}, "-postgres", dsn), args[1:]...)...)
	}
	testenv.Within(t, 15*time.Second, func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(context.Background())
		sp, err := tx.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		_, err = pgstore.DoTx(ctx, rt, sp, pgstore.TxCall[string, string]{Operation: op, Key: "k1", Request: "x",
			Effect: func(ctx context.Context, tx pgx.Tx, r string) (string, error) {
				_, err := tx.Exec(ctx, "SELECT 1")
				return "booked", err
			}})
		if err != nil {
			t.Errorf("DoTx: %v", err)
			return
		}
		if err := sp.Rollback(ctx); err != nil { // the savepoint around DoTx: nothing of it remains
			t.Error(err)
			return
		}
		time.Sleep(2500 * time.Millisecond) // the transaction goes on, past the lease
		code, out, errOut := ctl("list", "-scope", scope, "-stuck", "-json")
		if code != exitOK {
			t.Errorf("list: exit %d: %s", code, errOut)
			return
		}
		listed := decodeLines(t, out)
		_, shown, _ := ctl("show", "-scope", scope, "-op", op, "-key", "k1")
		rcode, _, rerr := ctl("resolve", "-scope", scope, "-op", op, "-key", "k1", "-to", "released", "-reason", "r40: looks stuck", "-who", "r40")
		t.Logf("show:\n%s\nresolve -to released: exit %d %s", shown, rcode, strings.TrimSpace(rerr))
		if len(listed) == 0 && rcode == exitOK {
			t.Errorf("idemctl list -stuck listed no record, yet the PROCESSING claim's lease had expired and no one held it: resolve took it (exit %d)", rcode)
		}
	})
}
