package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise (Migrate): "safe to run on every start". Schedule: a replica
// has a DoTx transaction open (it recorded SUCCESS and has not committed:
// the record table is locked ROW EXCLUSIVE until it ends) while another
// replica starts and calls Migrate. An ALTER TABLE waits for that
// transaction, and every statement on the table queues behind the
// waiting ALTER: claims and replays of every key stall until the
// transaction ends (in the test suite, a DoTx test's 30 s context; in
// production, the longest transaction of the fleet). Migrate must not
// stall traffic: on a current schema it takes no lock on the table, and
// when it must change the schema it gives up its lock wait quickly and
// tries again.
func TestMigrateDoesNotStallTraffic(t *testing.T) {
	for _, current := range []bool{true, false} {
		t.Run(fmt.Sprint("current=", current), func(t *testing.T) {
			p := advSchemaPool(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if !current {
				// A table migrated by an earlier release that lacks an
				// index this one has: Migrate must change the schema, and
				// CREATE INDEX waits for every open writer.
				if _, err := p.Exec(ctx, "COMMENT ON TABLE idem_records IS NULL; DROP INDEX idem_records_pending_idx"); err != nil {
					t.Fatal(err)
				}
			}
			rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			scoped := runtime.WithScope(ctx, t.Name())
			// A record to replay.
			if _, err := runtime.Do(scoped, rt, runtime.Call[plainTxReq, string]{Operation: "Mig.Replay", Key: "r", Request: plainTxReq{Order: "o", Cents: 1},
				Effect: func(context.Context, plainTxReq) (string, error) { return "done", nil }}); err != nil {
				t.Fatal(err)
			}
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := pgstore.DoTx(scoped, rt, tx, pgstore.TxCall[plainTxReq, string]{Operation: "Mig.Tx", Key: "k", Request: plainTxReq{Order: "o", Cents: 1},
				Effect: func(context.Context, pgx.Tx, plainTxReq) (string, error) { return "done", nil }}); err != nil {
				t.Fatal(err)
			}

			migrated := make(chan error, 1)
			migrateCtx, stopMigrate := context.WithTimeout(ctx, 3*time.Second)
			defer stopMigrate()
			go func() { migrated <- pgstore.Migrate(migrateCtx, p) }()

			// Replays and new claims while Migrate runs: none may wait
			// for the open transaction.
			worst := time.Duration(0)
			for i := range 20 {
				time.Sleep(50 * time.Millisecond)
				start := time.Now()
				callCtx, stop := context.WithTimeout(scoped, 10*time.Second)
				_, err := runtime.Do(callCtx, rt, runtime.Call[plainTxReq, string]{Operation: "Mig.Replay", Key: "r", Request: plainTxReq{Order: "o", Cents: 1},
					Effect: func(context.Context, plainTxReq) (string, error) { return "again", nil }})
				if err == nil {
					_, err = runtime.Do(callCtx, rt, runtime.Call[plainTxReq, string]{Operation: "Mig.New", Key: fmt.Sprint("n", i), Request: plainTxReq{Order: "o", Cents: 1},
						Effect: func(context.Context, plainTxReq) (string, error) { return "new", nil }})
				}
				stop()
				took := time.Since(start)
				worst = max(worst, took)
				if err != nil {
					t.Fatalf("call %d while Migrate ran beside an open DoTx transaction: %v after %v", i, err, took.Round(time.Millisecond))
				}
			}
			// Under a loaded machine a call can take a while on its own;
			// waiting out the transaction would take until Migrate's
			// context ends (3 s) or for ever.
			if worst > 1500*time.Millisecond {
				t.Errorf("a replay or claim waited %v while Migrate ran beside an open DoTx transaction", worst.Round(time.Millisecond))
			}
			err = <-migrated
			if current {
				if err != nil {
					t.Errorf("Migrate of a current schema beside an open transaction: %v", err)
				}
			} else {
				var pgErr interface{ SQLState() string }
				if err == nil || !errors.As(err, &pgErr) || pgErr.SQLState() != "55P03" {
					t.Errorf("Migrate that must change the schema while a transaction holds the table: %v, want the lock wait given up (55P03) when its context ended", err)
				}
			}
			// A Migrate that is still trying when the transaction ends
			// completes.
			go func() { migrated <- pgstore.Migrate(ctx, p) }()
			time.Sleep(700 * time.Millisecond)
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-migrated:
				if err != nil {
					t.Fatalf("Migrate when the transaction ended: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Migrate still ran 20 s after the transaction holding the table ended")
			}
			// The next one takes no lock on the table.
			assertMigrateTakesNoTableLock(ctx, t, p)
		})
	}
}

// assertMigrateTakesNoTableLock runs Migrate while a transaction holds the
// table ACCESS SHARE (an open read), which any ALTER TABLE waits for.
func assertMigrateTakesNoTableLock(ctx context.Context, t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM idem_records"); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pgstore.Migrate(mctx, p); err != nil {
		t.Fatalf("Migrate of a current schema waited for a transaction that reads the table: %v", err)
	}
}

// TestMigrateChecksEveryColumn: the columns Migrate checks a table for are
// the columns the schema creates, so a column added to queries/schema.sql
// and not to the check cannot let a table without it pass as current.
func TestMigrateChecksEveryColumn(t *testing.T) {
	p := advSchemaPool(t)
	rows, err := p.Query(context.Background(), `SELECT attname FROM pg_attribute
		WHERE attrelid = 'idem_records'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, pgstore.SchemaColumns) {
		t.Errorf("the schema creates the columns\n%v\nMigrate checks for\n%v", got, pgstore.SchemaColumns)
	}
}

// Promise (Migrate): when the schema must change and the table stays in
// use, each try waits at most 250 ms for a lock, "until ctx ends, and
// then returns the lock timeout's error (SQLSTATE 55P03)". Schedule:
// more replicas start at once than can each take a 250 ms turn before
// their deadline, beside a transaction that keeps the table in use. The
// calls are serialized by an advisory lock: one queued behind the others
// for its whole deadline never tried the table, and it too must end with
// the lock timeout's error, not the context's alone (found in a CI run at
// load 16 with 8 replicas and 4 s deadlines).
func TestMigrateQueuedReplicasEndWithLockTimeout(t *testing.T) {
	p := advSchemaPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Exec(ctx, "DROP INDEX idem_records_pending_idx"); err != nil {
		t.Fatal(err)
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE idem_records IN ROW EXCLUSIVE MODE"); err != nil { // as a write would
		t.Fatal(err)
	}
	const replicas = 16
	const deadline = 2 * time.Second // 8 turns of 250 ms
	warmPool(t, p, replicas+1)
	errs := make([]error, replicas)
	tooks := make([]time.Duration, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			mctx, stop := context.WithTimeout(ctx, deadline)
			defer stop()
			start := time.Now()
			errs[i] = pgstore.Migrate(mctx, p)
			tooks[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			t.Errorf("replica %d (returned after %v): %v; want the lock timeout's error", i, tooks[i], err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("replica %d: %v; want it to say its context ended", i, err)
		}
	}
}
