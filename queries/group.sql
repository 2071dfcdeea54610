-- The group-commit queries (pgstore.WithGroupCommit), compiled by sqlc into
-- runtime/pgstore/internal/db with the record queries of records.sql.
--
-- Each statement serves a batch of callers at once, set-based: the
-- arguments of the batch come as parallel arrays of one length, the arg CTE
-- turns them into rows numbered from 1 (column i: unnest of the first array
-- WITH ORDINALITY, the others subscripted by i), and every row of the
-- result carries the i of the caller it answers, so that each caller gets
-- its own outcome, exactly what Claim or Transition (records.sql) would have
-- given it. (Not unnest(a, b, ...): sqlc's catalog lacks the multi-argument
-- unnest, sqlc-dev/sqlc#3507.) One statement is one implicit transaction:
-- one commit flush for the batch, and the batch commits whole or not at all.
--
-- Plans: the statements are prepared once per connection and run on a
-- cached generic plan, so a batch costs no planning. The LIMIT of the arg
-- CTE is the batch's own length, a no-op, but a generic plan cannot know
-- it and so estimates a tenth of unnest's default hundred rows: every join
-- with idem_records then probes the primary key once per row (nested
-- loops). Without it the planner counts on a hundred rows or more and may
-- hash-join the whole table (measured: 18 ms for a batch of four on a
-- table of 12,000 rows, against 0.4 ms).
--
-- The caller (group.go) guarantees what the SQL relies on: an identity
-- appears at most once in a batch (a duplicate waits for the next batch),
-- and the rows come sorted by identity, so that concurrent batches insert in
-- one order and never wait on each other in a cycle.
--
-- Time and versions are as in records.sql: the clock is read once per
-- statement with clock_timestamp(), and every version-changing write, each
-- row on its own, draws nextval('idem_records_version_seq').

-- name: ClaimSet :many
-- Claim for a batch: inserts a PROCESSING record for every identity that
-- has none, and returns for every other one its existing record untouched
-- (claimed false; no row lock, no write). An identity whose record a
-- concurrent claim committed after the statement's snapshot gets no row: its
-- caller runs the claim again, as after Claim. A record that may be taken
-- over is returned like any existing one; the caller takes it with
-- ClaimExisting, a compare-and-set of its own.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
arg AS MATERIALIZED (
    SELECT a.scope, (@operations::text[])[a.i] AS operation, (@keys::text[])[a.i] AS key,
        (@fingerprints::bytea[])[a.i] AS fingerprint, (@owners::text[])[a.i] AS owner,
        (@leases::interval[])[a.i] AS lease, (@requests::bytea[])[a.i] AS request, a.i
    FROM unnest(@scopes::text[]) WITH ORDINALITY AS a(scope, i)
    -- A no-op, for the plan: see the head of this file.
    LIMIT cardinality(@scopes::text[])
),
ins AS (
    INSERT INTO idem_records AS r (
        scope, operation, key, fingerprint, state, owner, version,
        lease_expires_at, expires_at, request, response, takeovers, attempts,
        created_at, updated_at, token, note, response_omitted
    )
    SELECT a.scope, a.operation, a.key, a.fingerprint, 'PROCESSING', a.owner,
        nextval('idem_records_version_seq'),
        clk.t + a.lease, NULL, a.request, NULL, 0, 0,
        clk.t, clk.t, '', '', false
    FROM arg a CROSS JOIN clk
    -- A replay inserts nothing and so draws no version: the row exists.
    WHERE NOT EXISTS (SELECT 1 FROM idem_records x
                      WHERE x.scope = a.scope AND x.operation = a.operation AND x.key = a.key)
    -- In the batch's order (by identity): see the head of this file.
    ORDER BY a.i
    ON CONFLICT (scope, operation, key) DO NOTHING
    RETURNING r.scope, r.operation, r.key, r.fingerprint, r.state, r.owner, r.version,
        r.lease_expires_at, r.expires_at, r.request, r.response, r.takeovers, r.attempts,
        r.created_at, r.updated_at, r.token, r.note, r.response_omitted
)
SELECT a.i::bigint AS i, true AS claimed, n.scope, n.operation, n.key, n.fingerprint, n.state, n.owner, n.version,
    n.lease_expires_at, n.expires_at, n.request, n.response, n.takeovers, n.attempts,
    n.created_at, n.updated_at, n.token, n.note, n.response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now
FROM ins n
JOIN arg a ON a.scope = n.scope AND a.operation = n.operation AND a.key = n.key
UNION ALL
SELECT a.i::bigint AS i, false AS claimed, e.scope, e.operation, e.key, e.fingerprint, e.state, e.owner, e.version,
    e.lease_expires_at, e.expires_at, e.request, e.response, e.takeovers, e.attempts,
    e.created_at, e.updated_at, e.token, e.note, e.response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now
FROM arg a
JOIN idem_records e ON e.scope = a.scope AND e.operation = a.operation AND e.key = a.key
WHERE NOT EXISTS (SELECT 1 FROM ins n
                  WHERE n.scope = a.scope AND n.operation = a.operation AND n.key = a.key);

-- name: TransitionSet :many
-- Transition for a batch: a compare-and-set on (state, owner, version) for
-- each row, which comes back with its new version. A row whose
-- compare-and-set fails comes back only when its record still carries the
-- row's token (a retry of a write that was applied but whose reply was
-- lost), with that record's version, as if this run had written it; no row
-- means the lease was lost.
WITH clk AS MATERIALIZED (SELECT clock_timestamp() AS t),
arg AS MATERIALIZED (
    SELECT a.scope, (@operations::text[])[a.i] AS operation, (@keys::text[])[a.i] AS key,
        (@from_states::text[])[a.i] AS from_state, (@owners::text[])[a.i] AS owner,
        (@versions::bigint[])[a.i] AS version, (@to_states::text[])[a.i] AS to_state,
        (@new_owners::text[])[a.i] AS new_owner, (@leases::interval[])[a.i] AS lease,
        (@ttls::interval[])[a.i] AS ttl, (@responses::bytea[])[a.i] AS response,
        (@responses_omitted::boolean[])[a.i] AS response_omitted, (@notes::text[])[a.i] AS note,
        (@tokens::text[])[a.i] AS token, a.i
    FROM unnest(@scopes::text[]) WITH ORDINALITY AS a(scope, i)
    -- A no-op, for the plan: see the head of this file.
    LIMIT cardinality(@scopes::text[])
),
upd AS (
    UPDATE idem_records r SET
        state            = a.to_state,
        owner            = a.new_owner,
        version          = nextval('idem_records_version_seq'),
        lease_expires_at = CASE WHEN a.lease > interval '0' THEN clk.t + a.lease END,
        expires_at       = CASE WHEN a.to_state IN ('SUCCESS', 'FAILED') THEN clk.t + a.ttl END,
        response         = CASE WHEN a.to_state IN ('SUCCESS', 'FAILED') THEN a.response ELSE r.response END,
        response_omitted = a.response_omitted,
        note             = a.note,
        token            = a.token,
        updated_at       = clk.t
    FROM arg a CROSS JOIN clk
    WHERE r.scope = a.scope AND r.operation = a.operation AND r.key = a.key
      AND r.state = a.from_state AND r.owner = a.owner AND r.version = a.version
    RETURNING a.i, r.version
)
SELECT u.i::bigint AS i, u.version FROM upd u
UNION ALL
SELECT a.i::bigint AS i, e.version
FROM arg a
JOIN idem_records e ON e.scope = a.scope AND e.operation = a.operation AND e.key = a.key
WHERE a.token <> '' AND e.token = a.token
  AND NOT EXISTS (SELECT 1 FROM upd u WHERE u.i = a.i);
