package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime/pgstore"
)

// TestR32MigrateInCallerTxHoldsTurnForCurrentTable: a Migrate run on a
// caller's transaction (documented: "On a transaction (conn a pgx.Tx) it
// runs in a savepoint") keeps the advisory lock of its turn after it
// returned, until the caller's transaction ends, even when it found the
// table current and changed nothing. Every other start's Migrate, on a
// table that is current, then waits for that turn and fails with 55P03
// instead of returning at once ("a later call that finds the mark ...
// takes no lock on the table"; "It is safe to run on every start").
func TestR32MigrateInCallerTxHoldsTurnForCurrentTable(t *testing.T) {
	p := advSchemaPool(t) // migrated: the table is current
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// A deploy's migration transaction (or a replica's start-up
	// transaction) that runs idem's Migrate first, then its own steps.
	migrateInOpenTx(ctx, t, p)
	var err error
	// Another replica starts meanwhile; the table is current.
	mctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	start := time.Now()
	err = pgstore.Migrate(mctx, p)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Migrate of a current table, beside a caller's transaction that ran Migrate and changed nothing, failed after %v: %v", took, err)
	}
	if took > time.Second {
		t.Errorf("Migrate of a current table took %v", took)
	}
}

// TestR32MigrateInCallerTxBlocksOtherSchema: the same, for another
// service's table in another schema of the database (the advisory lock's
// key is one constant, not the table's): its Migrate, of a current table
// it alone uses, fails with 55P03 while the first service's transaction
// that ran Migrate is open.
func TestR32MigrateInCallerTxBlocksOtherSchema(t *testing.T) {
	a := advSchemaPool(t)
	b := advSchemaPool(t) // another schema, migrated: current
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	migrateInOpenTx(ctx, t, a)
	mctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	start := time.Now()
	if err := pgstore.Migrate(mctx, b); err != nil {
		t.Fatalf("Migrate of another schema's current table failed after %v: %v", time.Since(start), err)
	}
}

// TestMigrateTurnsArePerSchema: turns are the table's. A caller's
// transaction that ran Migrate and changed its table's schema holds that
// table's turn until it ends; another service's Migrate, which must change
// its own table in another schema, neither waits for it nor fails.
func TestMigrateTurnsArePerSchema(t *testing.T) {
	a := advSchemaPool(t)
	b := advSchemaPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, p := range []*pgxpool.Pool{a, b} {
		if _, err := p.Exec(ctx, "DROP INDEX idem_records_pending_idx"); err != nil {
			t.Fatal(err)
		}
	}
	migrateInOpenTx(ctx, t, a)
	mctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	start := time.Now()
	if err := pgstore.Migrate(mctx, b); err != nil {
		t.Fatalf("Migrate of another schema's table, which needs a change, failed after %v: %v", time.Since(start), err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'idem_records_pending_idx'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the other schema's index: %d, %v; want it created", n, err)
	}
}

// migrateInOpenTx runs Migrate on a transaction of p's that it leaves open
// until the test ends.
func migrateInOpenTx(ctx context.Context, t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if err := pgstore.Migrate(ctx, tx); err != nil {
		t.Fatalf("Migrate on the caller's transaction: %v", err)
	}
}
