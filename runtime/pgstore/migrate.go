package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/queries"
)

// Beginner is what [Migrate] needs: a pool, a connection or a transaction.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrateLock seeds the advisory lock key that serializes the Migrate calls
// that change one record table (CREATE ... IF NOT EXISTS alone races on the
// catalog): the key is a hash of the table's schema with this seed, so
// calls on tables in other schemas never wait for each other.
const migrateLock = 0x1de3_5c4e_3a11_0001

// migrateLockTimeout bounds each wait of the schema's statements for a lock
// on the record table: statements on the table that arrive meanwhile queue
// behind the waiting one, so this is the longest Migrate can hold up
// claims and replays while it waits.
const migrateLockTimeout = 250 * time.Millisecond

// migrateIdleTimeout ends Migrate's transaction on the server when its
// client goes silent in the middle of it (a network partition, a paused
// process): otherwise the server keeps it, with the advisory lock every
// other start waits for and, once an ALTER TABLE ran, the table's ACCESS
// EXCLUSIVE lock every claim and replay waits for, until TCP notices
// (hours).
const migrateIdleTimeout = time.Second

// schemaColumns are the record table's columns the store's queries use.
var schemaColumns = []string{
	"scope", "operation", "key", "fingerprint", "state", "owner", "version", "lease_expires_at", "expires_at",
	"request", "response", "takeovers", "attempts", "created_at", "updated_at", "token", "note",
	"response_omitted", "xact",
}

// schemaMark is the comment Migrate leaves on the record table once it has
// applied the schema: a digest of [queries.Schema].
var schemaMark = func() string {
	sum := sha256.Sum256([]byte(queries.Schema))
	return "idem schema " + hex.EncodeToString(sum[:8])
}()

// Migrate creates the record table, its sequence, function and indexes if
// they do not exist, in one transaction under an advisory lock (the
// table's: calls on tables in other schemas never wait for each other), so
// concurrent starts are safe. It works on the table the store's queries
// use: the first idem_records on the connection's search_path, or a new
// one where CREATE TABLE puts it (the first schema of the path that
// exists).
//
// It is safe to run on every start, beside traffic:
//   - once it has applied this release's schema it marks the table (a
//     comment); a later call that finds the mark, and every object the
//     queries use, takes no lock on the table, nor a turn (the advisory
//     lock): it never waits for other calls;
//   - a table it may not change (another role owns it: a migration tool
//     applied the schema) is left alone when it has every column, index,
//     sequence and function the queries use, and is an error otherwise;
//   - when it changes the schema, each statement waits at most 250 ms for a
//     lock on the table (an ALTER TABLE waits for every open transaction
//     that touched the table, a [DoTx] caller's among them, and every
//     statement on the table queues behind it meanwhile); past that it
//     tries again after a pause, until ctx ends, and then returns the lock
//     timeout's error (SQLSTATE 55P03). Concurrent calls take turns (an
//     advisory lock), and a call waits at most 250 ms for its turn too,
//     then tries again the same way. Give ctx a deadline;
//   - its transaction ends on the server when its client goes silent for a
//     second in the middle of it, so a replica partitioned mid-way holds
//     neither the table nor the other starts for longer.
//
// On a transaction (conn a [pgx.Tx]) it runs in a savepoint and leaves the
// transaction's settings as it found them; when it changed the schema, the
// turn and the table's locks its statements took are held until that
// transaction ends (as any DDL in it), so other replicas' calls that must
// change the schema wait for it, 250 ms at a time. To manage the schema with a
// migration tool instead, use [queries.Schema] (or `idemgen schema`).
func Migrate(ctx context.Context, conn Beginner) error {
	pause := 50 * time.Millisecond
	var held error // the last try's lock timeout
	for try := 1; ; try++ {
		err := migrateOnce(ctx, conn)
		if retryMigrate(err) {
			held = err
			err = sleepCtx(ctx, pause)
			pause = min(2*pause, 2*time.Second)
			if err == nil {
				continue
			}
		}
		if err != nil && held != nil && ctx.Err() != nil {
			return fmt.Errorf("pgstore: migrate: the record table stayed in use by other transactions (or other Migrate calls held their turn) through %d tries (each waits at most %v for a lock), until the context ended: %w (%w)",
				try, migrateLockTimeout, held, err)
		}
		return err
	}
}

// retryMigrate reports whether a try failed on a lock it gave up waiting
// for, or on its own session ended by the idle timeout (a stalled client).
func retryMigrate(err error) bool {
	pgErr := (*pgconn.PgError)(nil)
	return errors.As(err, &pgErr) && (pgErr.Code == lockNotAvailable || pgErr.Code == "25P03")
}

// migrateOnce applies the schema unless the table is current.
func migrateOnce(ctx context.Context, conn Beginner) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The settings changed below, restored before the commit: on a
	// caller's transaction the commit is a savepoint's release, which keeps
	// them.
	var path, lockTimeout, idleTimeout string
	if err := tx.QueryRow(ctx, `SELECT current_setting('search_path'), current_setting('lock_timeout'),
		current_setting('idle_in_transaction_session_timeout')`).Scan(&path, &lockTimeout, &idleTimeout); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	// The lock timeout bounds the wait for the advisory lock too: a call
	// queued behind other Migrate calls (replicas starting at once, each
	// waiting for the table in its turn) tries again after a pause like a
	// call that waited for the table, and so ends, when ctx does, with
	// the lock timeout's error rather than the context's alone.
	if err := setLocal(ctx, tx, "idle_in_transaction_session_timeout", fmt.Sprintf("%dms", migrateIdleTimeout.Milliseconds()),
		"lock_timeout", fmt.Sprintf("%dms", migrateLockTimeout.Milliseconds())); err != nil {
		return err
	}
	commit := func() error {
		if err := setLocal(ctx, tx, "lock_timeout", lockTimeout, "search_path", path, "idle_in_transaction_session_timeout", idleTimeout); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("pgstore: migrate: commit: %w", err)
		}
		return nil
	}
	// The catalog is read first, with no lock: a table that is current (or
	// another role's, complete) needs no turn, so a start never waits for
	// one, nor for a caller's transaction that holds one (on a pgx.Tx the
	// turn lasts until that transaction ends).
	cat, err := readCatalog(ctx, tx)
	if err != nil {
		return err
	}
	if done, err := cat.settled(); err != nil {
		return err
	} else if done {
		return commit()
	}
	// A change: take the table's turn (Migrate calls on other tables, in
	// other schemas, never wait for it), then read the catalog again:
	// another Migrate may just have committed.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended(coalesce($2, current_schema(), '') || '.idem_records', $1))", int64(migrateLock), cat.schema); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	if cat, err = readCatalog(ctx, tx); err != nil {
		return err
	}
	if done, err := cat.settled(); err != nil {
		return err
	} else if done {
		return commit()
	}
	schema := cat.schema
	if schema != nil {
		// CREATE ... IF NOT EXISTS looks in the first schema of the path
		// only: on the table's own, not a new empty table before it.
		if err := setLocal(ctx, tx, "search_path", quoteIdent(*schema)); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, queries.Schema); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, "COMMENT ON TABLE idem_records IS '"+schemaMark+"'"); err != nil {
		return fmt.Errorf("pgstore: migrate: marking the table: %w", err)
	}
	return commit()
}

// catalog is what Migrate reads of the record table the queries resolve
// to (no lock on the table).
type catalog struct {
	schema, mark *string // the table's schema (nil: no table) and comment
	owned        bool    // this role may change it
	missing      []string
}

func readCatalog(ctx context.Context, tx pgx.Tx) (catalog, error) {
	var c catalog
	if err := tx.QueryRow(ctx, `
		SELECT n.nspname, obj_description(c.oid, 'pg_class'), coalesce(pg_has_role(c.relowner, 'USAGE'), false),
			array_remove(ARRAY(SELECT col FROM unnest($1::text[]) col
					WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped))
				|| CASE WHEN to_regclass('idem_records_version_seq') IS NULL THEN ARRAY['sequence idem_records_version_seq'] END
				|| CASE WHEN to_regprocedure('idem_xact_ended(xid8)') IS NULL THEN ARRAY['function idem_xact_ended(xid8)'] END
				|| CASE WHEN to_regclass('idem_records_expires_at_idx') IS NULL THEN ARRAY['index idem_records_expires_at_idx'] END
				|| CASE WHEN to_regclass('idem_records_pending_idx') IS NULL THEN ARRAY['index idem_records_pending_idx'] END, NULL)
		FROM (SELECT to_regclass('idem_records') AS oid) r
		LEFT JOIN pg_class c ON c.oid = r.oid
		LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`, schemaColumns).Scan(&c.schema, &c.mark, &c.owned, &c.missing); err != nil {
		return c, fmt.Errorf("pgstore: migrate: reading the catalog: %w", err)
	}
	return c, nil
}

// settled reports whether the table needs no change: it is current, or
// another role's with all the queries use; err when another role's table
// lacks something.
func (c catalog) settled() (bool, error) {
	switch {
	case c.schema != nil && len(c.missing) == 0 && c.mark != nil && *c.mark == schemaMark:
		return true, nil // current
	case c.schema != nil && !c.owned && len(c.missing) == 0:
		return true, nil // another role's, with all the queries use
	case c.schema != nil && !c.owned:
		return false, fmt.Errorf("pgstore: migrate: %s.idem_records lacks %s, and this role does not own the table: run Migrate as its owner, or apply queries.Schema (idemgen schema) with your migration tool",
			*c.schema, strings.Join(c.missing, ", "))
	}
	return false, nil
}

// setLocal sets each name, value pair for the rest of tx.
func setLocal(ctx context.Context, tx pgx.Tx, kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", kv[i], kv[i+1]); err != nil {
			return fmt.Errorf("pgstore: migrate: setting %s: %w", kv[i], err)
		}
	}
	return nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
