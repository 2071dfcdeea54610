-- idem: the idempotency record table.
--
-- One row per identity (scope, operation, key). Leases and expiry are
-- compared with the database clock at the statement (clock_timestamp()),
-- never the application's, and never the transaction's start (now()): a
-- claim made inside a long transaction must not commit a lease or expiry
-- that is already past. Apply with pgstore.Migrate, or copy into your
-- migration tool; every statement is idempotent.

-- Versions (fencing tokens) come from one sequence, so a version never
-- repeats for an identity, across releases, sweeps and TTL replacements.
-- NO CYCLE and no CACHE: values grow in the order they are drawn.
CREATE SEQUENCE IF NOT EXISTS idem_records_version_seq AS bigint NO CYCLE;

CREATE TABLE IF NOT EXISTS idem_records (
    scope            text        NOT NULL,
    operation        text        NOT NULL,
    key              text        NOT NULL,
    fingerprint      bytea       NOT NULL,
    state            text        NOT NULL,
    owner            text        NOT NULL DEFAULT '',
    version          bigint      NOT NULL,
    lease_expires_at timestamptz,
    expires_at       timestamptz,
    request          bytea,
    response         bytea,
    takeovers        integer     NOT NULL DEFAULT 0,
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- token of the transition that last wrote the row ('' after a claim),
    -- so that a retried write whose reply was lost recognises itself.
    token            text        NOT NULL DEFAULT '',
    -- why the response was omitted, or an operator's resolution reason.
    note             text        NOT NULL DEFAULT '',
    -- SUCCESS whose response was not stored (too large, not encodable).
    response_omitted boolean     NOT NULL DEFAULT false,
    -- the caller's transaction of a DoTx claim (pgstore.DoTx), which writes
    -- SUCCESS in it: once that transaction has ended and the record is
    -- still PROCESSING, the claim's lease counts as ended (it rolled back,
    -- or committed without the SUCCESS write), and a duplicate takes the
    -- claim over at once instead of waiting for the lease. NULL otherwise.
    xact             xid8,
    PRIMARY KEY (scope, operation, key),
    CONSTRAINT idem_records_state_check
        CHECK (state IN ('PROCESSING', 'SUCCESS', 'FAILED', 'UNKNOWN')),
    CONSTRAINT idem_records_key_check
        CHECK (octet_length(key) BETWEEN 1 AND 255)
);

-- Tables whose versions came from a counter per record: start the sequence
-- above every version already written. Before the ALTERs below: this reads
-- the whole table, and after an ALTER it would do so holding the table's
-- ACCESS EXCLUSIVE lock, every claim and replay waiting for it.
SELECT setval('idem_records_version_seq', v, true)
FROM (SELECT max(version) AS v FROM idem_records) m
WHERE m.v > (SELECT last_value FROM idem_records_version_seq);

-- Tables created before the columns above existed. Each ALTER runs only
-- where its column is missing: an ALTER TABLE locks the table ACCESS
-- EXCLUSIVE even when IF NOT EXISTS finds the column, waits for every open
-- transaction that touched the table, and every claim and replay queues
-- behind it; applied to a current table, this file takes no lock on it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'token' AND NOT attisdropped) THEN
        ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS token text NOT NULL DEFAULT '';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'note' AND NOT attisdropped) THEN
        ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS note text NOT NULL DEFAULT '';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'response_omitted' AND NOT attisdropped) THEN
        ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS response_omitted boolean NOT NULL DEFAULT false;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'xact' AND NOT attisdropped) THEN
        ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS xact xid8;
    END IF;
END
$$;

-- idem_xact_ended reports whether the transaction a DoTx claim names (its
-- xact) has ended. A transaction ID this cluster has not reached yet (the
-- table was moved to another cluster, by pg_dump and restore or a
-- logical-replication upgrade, while the claim was PROCESSING) names no
-- transaction of this cluster: it has ended, where pg_xact_status would
-- fail ("transaction ID ... is in the future") every statement that reads
-- the row, the reconciler's walk over the whole table among them. One too
-- old for the commit log (NULL) has ended too. STRICT: NULL for a claim
-- that names no transaction.
CREATE OR REPLACE FUNCTION idem_xact_ended(x xid8) RETURNS boolean
    LANGUAGE plpgsql VOLATILE STRICT AS $$
BEGIN
    RETURN coalesce(pg_xact_status(x) <> 'in progress', true);
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN true;
END
$$;

-- The sweeper walks finished records by expiry; the reconciler walks
-- UNKNOWN and PROCESSING records by lease. Each CREATE INDEX runs only
-- where its index is missing: it locks the table SHARE even when IF NOT
-- EXISTS finds the index, and waits for every open writer meanwhile, every
-- other write queued behind it.
DO $$
BEGIN
    IF to_regclass('idem_records_expires_at_idx') IS NULL THEN
        CREATE INDEX IF NOT EXISTS idem_records_expires_at_idx
            ON idem_records (expires_at)
            WHERE expires_at IS NOT NULL;
    END IF;
    IF to_regclass('idem_records_pending_idx') IS NULL THEN
        CREATE INDEX IF NOT EXISTS idem_records_pending_idx
            ON idem_records (lease_expires_at)
            WHERE state IN ('PROCESSING', 'UNKNOWN');
    END IF;
END
$$;
