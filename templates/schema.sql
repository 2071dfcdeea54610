-- idem: the idempotency record table.
--
-- One row per identity (scope, operation, key). Leases and expiry are
-- compared with the database clock (now()), never the application's.
-- Apply with pgstore.Migrate, or copy into your migration tool.

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
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, operation, key),
    CONSTRAINT idem_records_state_check
        CHECK (state IN ('PROCESSING', 'SUCCESS', 'FAILED', 'UNKNOWN')),
    CONSTRAINT idem_records_key_check
        CHECK (octet_length(key) BETWEEN 1 AND 255)
);

-- The sweeper walks finished records by expiry.
CREATE INDEX IF NOT EXISTS idem_records_expires_at_idx
    ON idem_records (expires_at)
    WHERE expires_at IS NOT NULL;

-- The reconciler walks UNKNOWN and PROCESSING records by lease.
CREATE INDEX IF NOT EXISTS idem_records_pending_idx
    ON idem_records (lease_expires_at)
    WHERE state IN ('PROCESSING', 'UNKNOWN');
