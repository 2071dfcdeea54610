-- name: Claim :many
-- One statement: insert a new PROCESSING record, or take over a PROCESSING
-- record (same fingerprint) whose lease expired, or replace a finished record
-- whose TTL passed, or (acquire_unknown) acquire a free UNKNOWN record;
-- otherwise return the existing record untouched. The second branch reads
-- the snapshot of the statement: when a concurrent insert committed after it was
-- taken, no row comes back and the caller runs the statement again.
-- Parameters, in order: scope, operation, key, fingerprint, owner, lease
-- interval, request, whether to acquire UNKNOWN records.
WITH claimed AS (
    INSERT INTO idem_records AS r (
        scope, operation, key, fingerprint, state, owner, version,
        lease_expires_at, expires_at, request, response, takeovers, attempts,
        created_at, updated_at
    ) VALUES (
        $1, $2, $3, $4, 'PROCESSING', $5, 1,
        now() + $6::interval, NULL, $7, NULL, 0, 0,
        now(), now()
    )
    ON CONFLICT (scope, operation, key) DO UPDATE SET
        fingerprint      = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN excluded.fingerprint ELSE r.fingerprint END,
        state            = CASE WHEN r.state = 'UNKNOWN' THEN 'UNKNOWN' ELSE 'PROCESSING' END,
        owner            = excluded.owner,
        version          = r.version + 1,
        lease_expires_at = excluded.lease_expires_at,
        expires_at       = NULL,
        request          = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN excluded.request ELSE r.request END,
        response         = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN NULL ELSE r.response END,
        takeovers        = CASE WHEN r.state = 'PROCESSING' THEN r.takeovers + 1
                                WHEN r.state = 'UNKNOWN' THEN r.takeovers ELSE 0 END,
        attempts         = CASE WHEN r.state = 'UNKNOWN' THEN r.attempts + 1
                                WHEN r.state = 'PROCESSING' THEN r.attempts ELSE 0 END,
        created_at       = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN now() ELSE r.created_at END,
        updated_at       = now()
    WHERE (r.state = 'PROCESSING' AND r.lease_expires_at <= now() AND r.fingerprint = excluded.fingerprint)
       OR (r.state IN ('SUCCESS', 'FAILED') AND r.expires_at <= now())
       OR ($8::boolean AND r.state = 'UNKNOWN'
           AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= now())
           AND r.fingerprint = excluded.fingerprint)
    RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
        r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
        r.created_at, r.updated_at
)
SELECT true AS claimed, c.scope, c.operation, c.key, c.fingerprint, c.state, c.owner, c.version,
    c.lease_expires_at, c.expires_at, c.request, c.response, c.takeovers, c.attempts,
    c.created_at, c.updated_at, now()::timestamptz AS store_now
FROM claimed c
UNION ALL
SELECT false AS claimed, e.scope, e.operation, e.key, e.fingerprint, e.state, e.owner, e.version,
    e.lease_expires_at, e.expires_at, e.request, e.response, e.takeovers, e.attempts,
    e.created_at, e.updated_at, now()::timestamptz AS store_now
FROM idem_records e
WHERE e.scope = $1 AND e.operation = $2 AND e.key = $3
  AND NOT EXISTS (SELECT 1 FROM claimed);

-- name: Get :one
SELECT scope, operation, key, fingerprint, state, owner, version,
    lease_expires_at, expires_at, request, response, takeovers, attempts,
    created_at, updated_at, now()::timestamptz AS store_now
FROM idem_records
WHERE scope = @scope AND operation = @operation AND key = @key;

-- name: Transition :one
-- Compare-and-set on (state, owner, version); no row means the lease was lost.
UPDATE idem_records SET
    state            = @to_state,
    owner            = @new_owner,
    version          = version + 1,
    lease_expires_at = CASE WHEN @lease::interval > interval '0'
                            THEN now() + @lease::interval END,
    expires_at       = CASE WHEN @to_state IN ('SUCCESS', 'FAILED')
                            THEN now() + @ttl::interval END,
    response         = CASE WHEN @to_state IN ('SUCCESS', 'FAILED') THEN @response ELSE response END,
    updated_at       = now()
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = @from_state AND owner = @owner AND version = @version
RETURNING version;

-- name: Renew :one
UPDATE idem_records SET
    lease_expires_at = now() + @lease::interval,
    updated_at       = now()
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = @state AND owner = @owner AND version = @version
RETURNING lease_expires_at::timestamptz;

-- name: Release :execrows
DELETE FROM idem_records
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = @state AND owner = @owner AND version = @version;

-- name: AcquirePending :many
-- Takes records no one holds: UNKNOWN with a free lease (below max_attempts
-- when it is positive) or PROCESSING with an expired lease. SKIP LOCKED lets
-- concurrent reconcilers take disjoint batches without waiting on each other.
WITH due AS (
    SELECT d.scope, d.operation, d.key
    FROM idem_records d
    WHERE ((d.state = 'PROCESSING' AND d.lease_expires_at <= now())
        OR (d.state = 'UNKNOWN' AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
            AND (@max_attempts::integer <= 0 OR d.attempts < @max_attempts::integer)))
      AND (cardinality(@operations::text[]) = 0 OR d.operation = ANY(@operations::text[]))
    ORDER BY d.lease_expires_at NULLS FIRST
    LIMIT @max_records::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE idem_records r SET
    state            = 'UNKNOWN',
    owner            = @owner,
    version          = r.version + 1,
    lease_expires_at = now() + @lease::interval,
    attempts         = r.attempts + 1,
    updated_at       = now()
FROM due
WHERE r.scope = due.scope AND r.operation = due.operation AND r.key = due.key
RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
    r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
    r.created_at, r.updated_at, now()::timestamptz AS store_now;

-- name: Sweep :execrows
-- Deletes a bounded batch of finished records whose TTL passed, walking the
-- expiry index; SKIP LOCKED keeps sweepers off rows in use.
DELETE FROM idem_records r
USING (
    SELECT d.scope, d.operation, d.key
    FROM idem_records d
    WHERE d.expires_at <= now() AND d.state IN ('SUCCESS', 'FAILED')
    ORDER BY d.expires_at
    LIMIT @max_records::integer
    FOR UPDATE SKIP LOCKED
) AS expired
WHERE r.scope = expired.scope AND r.operation = expired.operation AND r.key = expired.key
  AND r.state IN ('SUCCESS', 'FAILED');
