-- The record queries, compiled by sqlc into runtime/pgstore/internal/db.
--
-- Time: every statement reads the clock once, in the clk CTE, with
-- clock_timestamp(): the time of the statement, not of its transaction
-- (now()), so that a claim or completion inside a caller's long transaction
-- (pgstore.DoTx) never writes a lease or expiry that is already past. The
-- CTE is referenced through scalar subqueries, which the planner runs once
-- and can use in index conditions.
--
-- Versions: every version-changing write draws from idem_records_version_seq,
-- so versions never repeat for an identity across its lives.

-- name: Claim :many
-- Inserts a new PROCESSING record, or returns the existing one untouched:
-- a replay takes no row lock and writes nothing (ON CONFLICT DO NOTHING).
-- When the existing record may be taken (an expired PROCESSING lease, a
-- finished record past its TTL, a free UNKNOWN record), the caller runs
-- ClaimExisting, a compare-and-set on the version it read. No row comes back
-- only when a concurrent claim committed after the statement's snapshot; the
-- caller runs it again.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
ins AS (
    INSERT INTO idem_records AS r (
        scope, operation, key, fingerprint, state, owner, version,
        lease_expires_at, expires_at, request, response, takeovers, attempts,
        created_at, updated_at, token, note, response_omitted
    )
    SELECT @scope::text, @operation::text, @key::text, @fingerprint::bytea, 'PROCESSING', @owner::text,
        nextval('idem_records_version_seq'),
        clk.t + @lease::interval, NULL, @request::bytea, NULL, 0, 0,
        clk.t, clk.t, '', '', false
    FROM clk
    -- A replay inserts nothing and so draws no version: the row exists.
    WHERE NOT EXISTS (SELECT 1 FROM idem_records x
                      WHERE x.scope = @scope AND x.operation = @operation AND x.key = @key)
    ON CONFLICT (scope, operation, key) DO NOTHING
    RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
        r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
        r.created_at, r.updated_at, r.token, r.note, r.response_omitted
)
SELECT true AS claimed, i.scope, i.operation, i.key, i.fingerprint, i.state, i.owner, i.version,
    i.lease_expires_at, i.expires_at, i.request, i.response, i.takeovers, i.attempts,
    i.created_at, i.updated_at, i.token, i.note, i.response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now
FROM ins i
UNION ALL
SELECT false AS claimed, e.scope, e.operation, e.key, e.fingerprint, e.state, e.owner, e.version,
    (CASE WHEN e.state = 'PROCESSING' AND e.xact IS NOT NULL AND idem_xact_ended(e.xact)
        THEN LEAST(e.lease_expires_at, (SELECT t FROM clk)) ELSE e.lease_expires_at END)::timestamptz AS lease_expires_at, e.expires_at, e.request, e.response, e.takeovers, e.attempts,
    e.created_at, e.updated_at, e.token, e.note, e.response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now
FROM idem_records e
WHERE e.scope = @scope AND e.operation = @operation AND e.key = @key
  AND NOT EXISTS (SELECT 1 FROM ins);

-- name: ClaimInsert :one
-- Inserts a new PROCESSING record, and returns what the store chose (the
-- record's other fields are the caller's). No row (pgx.ErrNoRows): the
-- record exists, and the caller reads it. The NOT EXISTS guard, on the
-- statement's snapshot, keeps an existing record from reaching the unique
-- index, which would wait for a transaction holding its row (a DoTx that
-- recorded SUCCESS and has not committed, maybe the caller's own) and would
-- draw a version for nothing. A concurrent insert of the same identity
-- fails this one with unique_violation (23505), the caller's cue to read:
-- cheaper on the path that inserts than ON CONFLICT DO NOTHING, whose
-- speculative insertion writes twice. The time is read once, in the clk
-- subquery; created_at is the store's now.
INSERT INTO idem_records AS r (
    scope, operation, key, fingerprint, state, owner, version,
    lease_expires_at, expires_at, request, response, takeovers, attempts,
    created_at, updated_at, token, note, response_omitted
)
SELECT @scope::text, @operation::text, @key::text, @fingerprint::bytea, 'PROCESSING', @owner::text,
    nextval('idem_records_version_seq'),
    clk.t + @lease::interval, NULL, @request::bytea, NULL, 0, 0,
    clk.t, clk.t, '', '', false
FROM (SELECT clock_timestamp() AS t) clk
WHERE NOT EXISTS (SELECT 1 FROM idem_records x
                  WHERE x.scope = @scope AND x.operation = @operation AND x.key = @key)
RETURNING r.version, r.lease_expires_at, r.created_at;

-- name: ClaimExisting :many
-- Takes an existing record at the version the caller read, if it may still
-- be taken: over an expired PROCESSING lease (same fingerprint), replacing a
-- finished record past its TTL (a new life), or (acquire_unknown) acquiring
-- a free UNKNOWN record (same fingerprint; Attempts, the reconciler's count,
-- is kept). No row: someone else changed it first; the caller claims again.
-- With nowait, a row another transaction holds is not waited for: the
-- statement fails with lock_not_available (55P03) at once. The row lock is
-- taken in the held CTE, which only nowait runs (the OR short-circuits).
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
held AS MATERIALIZED (
    SELECT 1 AS one FROM idem_records l
    WHERE l.scope = @scope AND l.operation = @operation AND l.key = @key
    FOR NO KEY UPDATE NOWAIT
)
UPDATE idem_records r SET
    fingerprint      = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN @fingerprint::bytea ELSE r.fingerprint END,
    state            = CASE WHEN r.state = 'UNKNOWN' THEN 'UNKNOWN' ELSE 'PROCESSING' END,
    owner            = @owner::text,
    version          = nextval('idem_records_version_seq'),
    lease_expires_at = clk.t + @lease::interval,
    expires_at       = NULL,
    request          = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN @request::bytea ELSE r.request END,
    response         = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN NULL ELSE r.response END,
    takeovers        = CASE WHEN r.state = 'PROCESSING' THEN r.takeovers + 1
                            WHEN r.state = 'UNKNOWN' THEN r.takeovers ELSE 0 END,
    attempts         = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN 0 ELSE r.attempts END,
    created_at       = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN clk.t ELSE r.created_at END,
    updated_at       = clk.t,
    token            = '',
    note             = CASE WHEN r.state IN ('SUCCESS', 'FAILED') THEN '' ELSE r.note END,
    response_omitted = false,
    xact             = NULL
FROM clk
WHERE r.scope = @scope AND r.operation = @operation AND r.key = @key AND r.version = @version
  AND ((r.state = 'PROCESSING' AND r.fingerprint = @fingerprint::bytea
        AND (r.lease_expires_at <= clk.t
             -- the caller's transaction of a DoTx claim ended without SUCCESS
             OR (r.xact IS NOT NULL AND idem_xact_ended(r.xact))))
    OR (r.state IN ('SUCCESS', 'FAILED') AND r.expires_at <= clk.t)
    OR (@acquire_unknown::boolean AND r.state = 'UNKNOWN'
        AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= clk.t)
        AND r.fingerprint = @fingerprint::bytea))
  AND (NOT @nowait::boolean OR EXISTS (SELECT 1 FROM held))
RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
    r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
    r.created_at, r.updated_at, r.token, r.note, r.response_omitted,
    clk.t::timestamptz AS store_now;

-- name: Get :one
-- The record of an identity: the first statement of a claim (a replay is
-- this one SELECT by primary key, and takes no lock), the poll of a caller
-- waiting for a call in flight, and Store.Get. The identity comes back too,
-- and the store checks it: a record is never answered for another identity.
SELECT r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
    (CASE WHEN r.state = 'PROCESSING' AND r.xact IS NOT NULL AND idem_xact_ended(r.xact)
        THEN LEAST(r.lease_expires_at, clk.t) ELSE r.lease_expires_at END)::timestamptz AS lease_expires_at,
    r.expires_at, r.request, r.response, r.takeovers, r.attempts,
    r.created_at, r.updated_at, r.token, r.note, r.response_omitted,
    clk.t::timestamptz AS store_now
FROM idem_records r, (SELECT clock_timestamp() AS t) clk
WHERE r.scope = @scope AND r.operation = @operation AND r.key = @key;

-- name: Transition :many
-- Compare-and-set on (state, owner, version). No row means the lease was
-- lost, unless the record still carries this write's token (a retry of a
-- write that was applied but whose reply was lost): then its version comes
-- back, as if this run had written it.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
upd AS (
    UPDATE idem_records r SET
        state            = @to_state::text,
        owner            = @new_owner::text,
        version          = nextval('idem_records_version_seq'),
        lease_expires_at = CASE WHEN @lease::interval > interval '0' THEN clk.t + @lease::interval END,
        expires_at       = CASE WHEN @to_state::text IN ('SUCCESS', 'FAILED') THEN clk.t + @ttl::interval END,
        response         = CASE WHEN @to_state::text IN ('SUCCESS', 'FAILED') THEN @response::bytea ELSE r.response END,
        response_omitted = @response_omitted::boolean,
        note             = @note::text,
        token            = @token::text,
        attempts         = CASE WHEN @to_state::text = 'PROCESSING' THEN 0 ELSE r.attempts END,
        updated_at       = clk.t,
        xact             = NULL
    FROM clk
    WHERE r.scope = @scope AND r.operation = @operation AND r.key = @key
      AND r.state = @from_state::text AND r.owner = @owner::text AND r.version = @version::bigint
    RETURNING r.version
)
SELECT u.version FROM upd u
UNION ALL
SELECT e.version FROM idem_records e
WHERE e.scope = @scope AND e.operation = @operation AND e.key = @key
  AND @token::text <> '' AND e.token = @token::text
  AND NOT EXISTS (SELECT 1 FROM upd);

-- name: TransitionCAS :one
-- Transition as a plain compare-and-set on (state, owner, version): the
-- statement of the unbatched path. No row (pgx.ErrNoRows): the lease was
-- lost, or an earlier try of this very write was applied and its reply
-- lost; the caller then asks TransitionApplied.
UPDATE idem_records r SET
    state            = @to_state::text,
    owner            = @new_owner::text,
    version          = nextval('idem_records_version_seq'),
    lease_expires_at = CASE WHEN @lease::interval > interval '0' THEN clk.t + @lease::interval END,
    expires_at       = CASE WHEN @to_state::text IN ('SUCCESS', 'FAILED') THEN clk.t + @ttl::interval END,
    response         = CASE WHEN @to_state::text IN ('SUCCESS', 'FAILED') THEN @response::bytea ELSE r.response END,
    response_omitted = @response_omitted::boolean,
    note             = @note::text,
    token            = @token::text,
    attempts         = CASE WHEN @to_state::text = 'PROCESSING' THEN 0 ELSE r.attempts END,
    updated_at       = clk.t,
    xact             = NULL
FROM (SELECT clock_timestamp() AS t) clk
WHERE r.scope = @scope AND r.operation = @operation AND r.key = @key
  AND r.state = @from_state::text AND r.owner = @owner::text AND r.version = @version::bigint
RETURNING r.version;

-- name: TransitionApplied :one
-- The version of the record while it still carries the token of a write
-- (never ''): every other write changes or clears the token, so this is
-- the version that write gave it.
SELECT version FROM idem_records
WHERE scope = @scope AND operation = @operation AND key = @key
  AND @token::text <> '' AND token = @token::text;

-- name: Renew :one
UPDATE idem_records SET
    lease_expires_at = clock_timestamp() + @lease::interval,
    updated_at       = clock_timestamp()
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = @state AND owner = @owner AND version = @version
RETURNING lease_expires_at::timestamptz;

-- name: CurrentXact :one
-- The ID of the transaction it runs in (one is assigned if it has none)
-- and its isolation level: DoTx asks its caller's transaction once it has
-- claimed, and refuses one that is not READ COMMITTED.
SELECT pg_current_xact_id()::text AS xact, current_setting('transaction_isolation') AS isolation;

-- name: MarkClaimTx :execrows
-- Names, on a claim just made, the transaction that will write its
-- SUCCESS (a DoTx caller's): see the xact column in schema.sql. No row: the
-- claim was lost.
UPDATE idem_records SET xact = CAST(sqlc.arg(xact)::text AS xid8)
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = 'PROCESSING' AND owner = @owner AND version = @version;

-- name: Release :execrows
DELETE FROM idem_records
WHERE scope = @scope AND operation = @operation AND key = @key
  AND state = @state AND owner = @owner AND version = @version;

-- name: AcquirePending :many
-- Takes records no one holds: UNKNOWN with a free lease (below max_attempts
-- when it is positive) or PROCESSING with an expired lease. A DoTx claim
-- (xact set) that this statement can lock, and whose transaction ended or
-- whose lease expired, is void: its effect commits only with the SUCCESS
-- write, which holds the row until the transaction ends (a rolled-back
-- savepoint undoes it), and a compare-and-set on the claim's version that
-- can no longer succeed once the claim is gone. Such claims are deleted,
-- not taken: an UNKNOWN outcome there would tell the retry "may have
-- happened", or fail it by a policy, for an effect that did not, and can
-- not, commit. SKIP LOCKED lets concurrent reconcilers take disjoint
-- batches without waiting on each other, and passes over a claim whose
-- transaction holds its SUCCESS write.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
void AS (
    DELETE FROM idem_records v
    USING (
        SELECT d.scope, d.operation, d.key
        FROM idem_records d
        WHERE d.state = 'PROCESSING' AND d.xact IS NOT NULL
          AND (d.lease_expires_at <= (SELECT t FROM clk) OR idem_xact_ended(d.xact))
          AND (cardinality(@operations::text[]) = 0 OR d.operation = ANY(@operations::text[]))
        LIMIT @max_records::integer
        FOR UPDATE OF d SKIP LOCKED
    ) AS ended
    WHERE v.scope = ended.scope AND v.operation = ended.operation AND v.key = ended.key
      AND v.state = 'PROCESSING'
),
due AS (
    SELECT d.scope, d.operation, d.key
    FROM idem_records d
    WHERE ((d.state = 'PROCESSING' AND d.lease_expires_at <= (SELECT t FROM clk) AND d.xact IS NULL)
        OR (d.state = 'UNKNOWN' AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= (SELECT t FROM clk))
            AND (@max_attempts::integer <= 0 OR d.attempts < @max_attempts::integer)))
      AND (cardinality(@operations::text[]) = 0 OR d.operation = ANY(@operations::text[]))
    ORDER BY d.lease_expires_at NULLS FIRST
    LIMIT @max_records::integer
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE idem_records r SET
    state            = 'UNKNOWN',
    owner            = @owner,
    version          = nextval('idem_records_version_seq'),
    lease_expires_at = (SELECT t FROM clk) + @lease::interval,
    attempts         = r.attempts + 1,
    token            = '',
    updated_at       = (SELECT t FROM clk),
    xact             = NULL
FROM due
WHERE r.scope = due.scope AND r.operation = due.operation AND r.key = due.key
RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
    r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
    r.created_at, r.updated_at, r.token, r.note, r.response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now;

-- name: Sweep :execrows
-- Deletes a bounded batch of finished records whose TTL passed, walking the
-- expiry index; SKIP LOCKED keeps sweepers off rows in use.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t)
DELETE FROM idem_records r
USING (
    SELECT d.scope, d.operation, d.key
    FROM idem_records d
    WHERE d.expires_at <= (SELECT t FROM clk) AND d.state IN ('SUCCESS', 'FAILED')
    ORDER BY d.expires_at
    LIMIT @max_records::integer
    FOR UPDATE OF d SKIP LOCKED
) AS expired
WHERE r.scope = expired.scope AND r.operation = expired.operation AND r.key = expired.key
  AND r.state IN ('SUCCESS', 'FAILED');

-- name: List :many
-- Records for an operator (idemctl), in identity byte order after a cursor.
-- A DoTx claim's lease is as Get answers it (ended with its transaction).
-- One whose lease expired while its transaction is still open is listed as
-- free: its transaction may hold its SUCCESS write (then a resolve is
-- refused, and a duplicate waits) or may not (a savepoint around the call
-- rolled back: then the claim is void), which only a lock tells.
SELECT scope, operation, key, fingerprint, state, owner, version,
    (CASE WHEN state = 'PROCESSING' AND xact IS NOT NULL AND idem_xact_ended(xact)
        THEN LEAST(lease_expires_at, clock_timestamp()) ELSE lease_expires_at END)::timestamptz AS lease_expires_at,
    expires_at, request, response, takeovers, attempts,
    created_at, updated_at, token, note, response_omitted,
    clock_timestamp()::timestamptz AS store_now
FROM idem_records
WHERE state = ANY(@states::text[])
  AND (@operation::text = '' OR operation = @operation::text)
  AND (NOT @by_scope::boolean OR scope = @scope::text)
  AND attempts >= @min_attempts::integer
  AND updated_at <= clock_timestamp() - @older_than::interval
  AND (NOT @lease_free::boolean OR lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp()
       OR (state = 'PROCESSING' AND xact IS NOT NULL AND idem_xact_ended(xact)))
  AND (scope COLLATE "C", operation COLLATE "C", key COLLATE "C")
      > (@after_scope::text, @after_operation::text, @after_key::text)
ORDER BY scope COLLATE "C", operation COLLATE "C", key COLLATE "C"
LIMIT @max_records::integer;
