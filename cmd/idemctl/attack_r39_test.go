package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r39PG opens the service's pool on the database idemctl is pointed at.
func r39PG(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool, dsn
}

// TestR39ListShowsOrphanedDoTxClaimHeld: a DoTx call succeeded and its
// caller rolled the transaction back. pgstore's DoTx doc: "the claim, still
// PROCESSING but naming a transaction that has ended, is taken over at once
// by the next duplicate". `idemctl show` (Get) reports the lease expired,
// `idemctl list -stuck` selects the record as one "no one holds", and
// `idemctl resolve` takes it: yet `idemctl list` prints its LEASE as
// "held 19s", which docs/idemctl.md defines as "a worker or a reconciler is
// on it: refused by resolve". List returns the stored lease_expires_at, not
// the one Get (and every other query) reads through the xact column.
func TestR39ListShowsOrphanedDoTxClaimHeld(t *testing.T) {
	pool, dsn := r39PG(t)
	sfx := suffix()
	scope, op := "r39/"+sfx, "R39"+sfx+".Book"
	ctx := runtime.WithScope(context.Background(), scope)
	rt, err := runtime.New(pgstore.New(pool), runtime.WithLease(20*time.Second), runtime.WithOwner("r39-"+sfx))
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
		_, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[string, string]{Operation: op, Key: "k1", Request: "x",
			Effect: func(ctx context.Context, tx pgx.Tx, r string) (string, error) {
				_, err := tx.Exec(ctx, "SELECT 1")
				return "booked", err
			}})
		if err != nil {
			t.Errorf("DoTx: %v", err)
		}
		if err := tx.Rollback(ctx); err != nil { // the caller changed its mind
			t.Error(err)
		}
		code, out, errOut := ctl("show", "-scope", scope, "-op", op, "-key", "k1", "-json")
		if code != exitOK {
			t.Errorf("show: exit %d: %s", code, errOut)
			return
		}
		shown := decodeLines(t, out)
		code, out, errOut = ctl("list", "-scope", scope, "-stuck", "-json")
		if code != exitOK {
			t.Errorf("list: exit %d: %s", code, errOut)
			return
		}
		listed := decodeLines(t, out)
		_, table, _ := ctl("list", "-scope", scope, "-stuck")
		if len(listed) != 1 || len(shown) != 1 {
			t.Errorf("list -stuck gave %d records, show %d; want 1 each", len(listed), len(shown))
			return
		}
		t.Logf("show: lease %q; list -stuck: lease %q\n%s", shown[0].Lease, listed[0].Lease, table)
		rcode, _, rerr := ctl("resolve", "-scope", scope, "-op", op, "-key", "k1", "-to", "released", "-reason", "r39: the caller rolled back", "-who", "r39")
		t.Logf("resolve -to released: exit %d %s", rcode, strings.TrimSpace(rerr))
		if listed[0].Lease == "held" {
			t.Errorf("idemctl list -stuck printed lease %q (docs/idemctl.md: \"a worker or a reconciler is on it: refused by resolve\") for a record show prints %q and resolve took (exit %d)",
				listed[0].Lease, shown[0].Lease, rcode)
		}
	})
}

// TestR39OpenDoTxClaimResolveRefused: a DoTx call succeeded and its caller
// still holds the transaction (its SUCCESS write uncommitted) past the
// lease. Review r39 found `idemctl list -stuck` listing it as a dead
// worker's; review r40 found the opposite filter hiding a claim whose
// savepoint rolled back (TestR40ListStuckHidesFreeClaimOfRolledBackSavepoint),
// which only a lock tells from this one. docs/idemctl.md: -stuck lists an
// expired DoTx claim whatever its transaction; resolve is the judge: it
// refuses this one, and the commit then makes the record SUCCESS.
func TestR39OpenDoTxClaimResolveRefused(t *testing.T) {
	pool, dsn := r39PG(t)
	sfx := suffix()
	scope, op := "r39/"+sfx, "R39"+sfx+".Book"
	ctx := runtime.WithScope(context.Background(), scope)
	rt, err := runtime.New(pgstore.New(pool), runtime.WithLease(time.Second), runtime.WithOwner("r39-"+sfx))
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
		_, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[string, string]{Operation: op, Key: "k1", Request: "x",
			Effect: func(ctx context.Context, tx pgx.Tx, r string) (string, error) {
				_, err := tx.Exec(ctx, "SELECT 1")
				return "booked", err
			}})
		if err != nil {
			t.Errorf("DoTx: %v", err)
			return
		}
		time.Sleep(2500 * time.Millisecond) // the transaction open, past the lease
		code, out, errOut := ctl("list", "-scope", scope, "-stuck", "-json")
		if code != exitOK {
			t.Errorf("list: exit %d: %s", code, errOut)
			return
		}
		listed := decodeLines(t, out)
		rcode, _, rerr := ctl("resolve", "-scope", scope, "-op", op, "-key", "k1", "-to", "released", "-reason", "r39: looks stuck", "-who", "r39")
		t.Logf("resolve -to released: exit %d %s", rcode, strings.TrimSpace(rerr))
		if len(listed) != 1 {
			t.Errorf("idemctl list -stuck listed %d records, want the expired claim", len(listed))
		}
		if rcode == exitOK {
			t.Errorf("resolve took a claim whose transaction holds its SUCCESS write")
		}
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("commit: %v", err)
		}
		if code, out, _ := ctl("show", "-scope", scope, "-op", op, "-key", "k1"); code != exitOK || !strings.Contains(out, "SUCCESS") {
			t.Errorf("show after the commit: exit %d: %s", code, out)
		}
	})
}
