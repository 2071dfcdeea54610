package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// TestForeignXactDoesNotPoisonTheStore: one PROCESSING record whose xact
// column names a transaction ID this cluster has not reached yet made every
// statement that reads that column over it fail with "transaction ID ...
// is in the future" (found by an adversarial review; fixed by
// idem_xact_ended, queries/schema.sql): the record could never be claimed,
// replayed or read again, and the reconciler's AcquirePending failed for
// every record of the
// table, so no other dead claim is ever converged.
//
// How such a row arises: the table is moved to another cluster (pg_dump
// and restore, a logical-replication or blue/green major-version upgrade)
// while a DoTx claim is PROCESSING (its transaction rolled back, or
// committed without SUCCESS, and no retry has come yet: the README's
// "succeeds | rolls back | PROCESSING, naming a transaction that has ended"
// row). The xid8 travels with the row; the new cluster's transaction
// counter starts lower. (A counter that starts higher makes the same column
// name an unrelated transaction of the new cluster.)
//
// Promises (public docs):
//   - README.md, Local effects: "Once your transaction has ended without
//     the SUCCESS write (it rolled back), the claim is taken over at once."
//   - README.md, UNKNOWN/reconciler: "makes the reconciler resolve its
//     UNKNOWN (and dead PROCESSING) records"; go doc runtime.Store:
//     AcquirePending acquires the records whose lease expired.
//   - docs/idemctl.md: list -stuck finds "PROCESSING records whose worker
//     died, when nothing takes them over".
//   - Brief's door "bad input: never a lost record": one row's column must
//     not make the rest of the table unreachable.
//
// Schedule (deterministic): record "dead" is an ordinary expired claim (a
// worker that died); record "moved" is a DoTx claim whose xact is this
// cluster's next transaction ID plus 10^6, its lease expired; "moved-live"
// the same with its lease still running. Invariants:
// Get of "moved" answers; a retry of "moved" runs its effect (its
// transaction ended); AcquirePending returns "dead" (and "moved").
//
// Run: go test ./runtime/pgstore/ -run TestForeignXactDoesNotPoisonTheStore -count=3 -v
func TestForeignXactDoesNotPoisonTheStore(t *testing.T) {
	pool := advSchemaPool(t)
	ctx := context.Background()
	s := pgstore.New(pool)
	scope := fmt.Sprintf("adv-xact/%d", time.Now().UnixNano())
	id := func(k string) runtime.Identity { return runtime.Identity{Scope: scope, Operation: "Adv.Op", Key: k} }
	fp := runtime.Fingerprint([]byte(`"r"`))
	for _, k := range []string{"dead", "moved"} {
		if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id(k), Fingerprint: fp, Owner: "crashed", Lease: 10 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	// moved-live: the same, its lease still running (a long lease, or a
	// quick cutover).
	if _, err := s.Claim(ctx, runtime.ClaimParams{ID: id("moved-live"), Fingerprint: fp, Owner: "crashed", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idem_records SET xact = (pg_current_xact_id()::text::bigint + 1000000)::text::xid8
		WHERE scope = $1 AND key IN ('moved', 'moved-live')`, scope); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // both leases expired

	if _, err := s.Get(ctx, id("moved")); err != nil {
		t.Errorf("Get of the moved record: %v", err)
	}
	rt, err := runtime.New(pgstore.New(pool), runtime.WithMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = runtime.Do(runtime.WithScope(ctx, scope), rt, runtime.Call[string, string]{
		Operation: "Adv.Op", Key: "moved", Request: "r",
		Effect: func(context.Context, string) (string, error) { ran = true; return "ok", nil },
	})
	if !ran {
		t.Errorf("a retry of the moved record (its transaction ended long ago) did not run: %v", err)
	}

	// idemctl list -lease-free: an operator's look for dead claims.
	if _, err := s.List(ctx, runtime.ListParams{Scope: &scope, LeaseFree: true}); err != nil {
		t.Errorf("List of the lease-free records (idemctl list) fails: %v", err)
	}
	recs, err := s.AcquirePending(ctx, runtime.AcquireParams{Owner: "reconciler", Lease: time.Minute, Limit: 10})
	if err != nil {
		t.Errorf("AcquirePending, with one moved record in the table, fails for every record: %v", err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.ID.Key] = true
	}
	if err == nil && !got["dead"] {
		t.Errorf("AcquirePending did not take the dead claim: %v", recs)
	}
}

// advSchemaPool returns a pool on a schema of its own on the test server,
// migrated, dropped at the end: rows these tests plant never reach the
// shared table other tests (and other helpers' runs) use.
func advSchemaPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	testPool(t) // skips or fails like the others when there is no server
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("adv_r12_%d", time.Now().UnixNano())
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if admin, err := pgxpool.NewWithConfig(context.Background(), cfg.Copy()); err == nil {
			_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			admin.Close()
		}
	})
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
