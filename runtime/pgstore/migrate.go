package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/queries"
)

// Beginner is what [Migrate] needs: a pool, a connection or a transaction.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrateLock is the advisory lock key that serializes concurrent Migrate
// calls (CREATE ... IF NOT EXISTS alone races on the catalog).
const migrateLock = 0x1de3_5c4e_3a11_0001

// migrateLockTimeout bounds each wait of the schema's statements for a lock
// on the record table: statements on the table that arrive meanwhile queue
// behind the waiting one, so this is the longest Migrate can hold up
// claims and replays.
const migrateLockTimeout = 250 * time.Millisecond

// schemaMark is the comment Migrate leaves on the record table once it has
// applied the schema: a digest of [queries.Schema]. A table that carries it
// is current, and Migrate leaves it alone.
var schemaMark = func() string {
	sum := sha256.Sum256([]byte(queries.Schema))
	return "idem schema " + hex.EncodeToString(sum[:8])
}()

// Migrate creates the record table and its indexes if they do not exist, in
// one transaction under an advisory lock, so concurrent starts are safe. It is
// safe to run on every start, beside traffic: once it has applied this
// release's schema it marks the table (a comment), and a later call finds
// the mark and takes no lock on the table. When the schema must change, each
// of its statements waits at most 250 ms for a lock on the table (an ALTER
// TABLE waits for every open transaction that touched the table, a
// [DoTx] caller's among them, and every statement on the table queues
// behind it meanwhile); past that it tries again after a pause, until ctx
// ends, and then returns the lock timeout's error (SQLSTATE 55P03). Give
// ctx a deadline.
//
// To manage the schema with a migration tool instead, use [queries.Schema]
// (or `idemgen schema`); Migrate on a table it applied changes the schema
// once (nothing but the mark) and leaves it alone after that.
func Migrate(ctx context.Context, conn Beginner) error {
	pause := 50 * time.Millisecond
	var held error // the last try's lock timeout
	for try := 1; ; try++ {
		err := migrateOnce(ctx, conn)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
			held = err
			err = sleepCtx(ctx, pause)
			pause = min(2*pause, 2*time.Second)
			if err == nil {
				continue
			}
		}
		if err != nil && held != nil && ctx.Err() != nil {
			return fmt.Errorf("pgstore: migrate: the record table stayed in use by other transactions through %d tries (each waits at most %v for its lock), until the context ended: %w (%w)",
				try, migrateLockTimeout, held, err)
		}
		return err
	}
}

// migrateOnce applies the schema unless the table carries its mark.
func migrateOnce(ctx context.Context, conn Beginner) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	// The catalog, read after the lock (another Migrate may just have
	// committed): neither to_regclass nor obj_description locks the table.
	var mark *string
	if err := tx.QueryRow(ctx, "SELECT obj_description(to_regclass('idem_records'), 'pg_class')").Scan(&mark); err != nil {
		return fmt.Errorf("pgstore: migrate: reading the schema's mark: %w", err)
	}
	if mark != nil && *mark == schemaMark {
		return tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", migrateLockTimeout.Milliseconds())); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, queries.Schema); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, "COMMENT ON TABLE idem_records IS '"+schemaMark+"'"); err != nil {
		return fmt.Errorf("pgstore: migrate: marking the table: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}
