-- The group-commit query (pgstore.WithGroupCommit), compiled by sqlc into
-- runtime/pgstore/internal/db with the record queries of records.sql.
--
-- One statement serves a batch of callers at once, set-based: the
-- arguments of the batch come as parallel arrays of one length (claims and
-- completions each their own), an arg CTE (carg, targ)
-- turns them into rows numbered from 1 (column i: unnest of the first array
-- WITH ORDINALITY, the others subscripted by i), and every row of the
-- result carries the i of the caller it answers, so that each caller gets
-- its own outcome, exactly what Claim or Transition (records.sql) would have
-- given it. (Not unnest(a, b, ...): sqlc's catalog lacks the multi-argument
-- unnest, sqlc-dev/sqlc#3507.) One statement is one implicit transaction:
-- one commit flush for the batch, and the batch commits whole or not at all.
--
-- Plans: the statement is prepared once per connection and runs on a
-- cached generic plan, so a batch costs no planning. The LIMIT of an arg
-- CTE is the batch's own length, a no-op, but a generic plan cannot know
-- it and so estimates a tenth of unnest's default hundred rows: every join
-- with idem_records then probes the primary key once per row (nested
-- loops). Without it the planner counts on a hundred rows or more and may
-- hash-join the whole table (measured: 18 ms for a batch of four on a
-- table of 12,000 rows, against 0.4 ms).
--
-- The caller (group.go) guarantees what the SQL relies on: an identity
-- appears at most once among a batch's claims and at most once among its
-- completions (a duplicate waits for the next batch: one INSERT must not
-- claim a key twice, one UPDATE must not write a row twice), and the rows
-- come sorted by identity, so that batches and other writers take row locks
-- in one order.
--
-- Time and versions are as in records.sql: the clock is read once per
-- statement with clock_timestamp(), and every version-changing write, each
-- row on its own, draws nextval('idem_records_version_seq').

-- name: GroupSet :many
-- A batch of claims and a batch of completions, in one statement: one
-- round trip and one commit for both (either may be empty). Each row of
-- the result answers one caller: kind 'c' the claim of claims[i], kind 't'
-- the completion of transitions[i].
--
-- Claims (c_ arrays): a PROCESSING record is inserted for every identity
-- that has none, and every other one gets its existing record untouched
-- (claimed false; no row lock, no write). An identity whose record a
-- concurrent claim committed after the statement's snapshot gets no row:
-- its caller runs the claim again, as after Claim. A record that may be
-- taken over is returned like any existing one; the caller takes it with
-- ClaimExisting, a compare-and-set of its own.
--
-- Completions (t_ arrays): a compare-and-set on (state, owner, version)
-- for each row, which comes back with its new version (in column version).
-- A row whose compare-and-set fails comes back only when its record still
-- carries the row's token (a retry of a write that was applied but whose
-- reply was lost), with that record's version, as if this run had written
-- it; no row means the lease was lost.
--
-- A claim and a completion of one identity in one statement see the same
-- snapshot: the claim returns the record as it was before the completion,
-- as if it had run first.
--
-- Lock waits: the statement waits at most @lock_timeout (pgstore's
-- batchLockWait) on a row lock or on another transaction's insert of the
-- same identity; past it the batch fails with lock_not_available (55P03),
-- commits nothing, and each of its callers runs its own statement. Without
-- the bound, one row that something else holds (a DoTx's transaction, an
-- operator's) would keep every other claim of the batch uncommitted, and
-- every duplicate of those claims waiting on their inserts, as long as that
-- lock is held. set_config(..., true) sets it for the statement's own
-- (implicit) transaction only; clk, which every write joins, runs it before
-- the first write.
WITH clk AS MATERIALIZED (
    SELECT clock_timestamp() AS t, set_config('lock_timeout', @lock_timeout::text, true) AS lock_timeout
),
carg AS MATERIALIZED (
    SELECT a.scope, (@c_operations::text[])[a.i] AS operation, (@c_keys::text[])[a.i] AS key,
        (@c_fingerprints::bytea[])[a.i] AS fingerprint, (@c_owners::text[])[a.i] AS owner,
        (@c_leases::interval[])[a.i] AS lease, (@c_requests::bytea[])[a.i] AS request, a.i
    FROM unnest(@c_scopes::text[]) WITH ORDINALITY AS a(scope, i)
    -- A no-op, for the plan: see the head of this file.
    LIMIT cardinality(@c_scopes::text[])
),
targ AS MATERIALIZED (
    SELECT a.scope, (@t_operations::text[])[a.i] AS operation, (@t_keys::text[])[a.i] AS key,
        (@t_from_states::text[])[a.i] AS from_state, (@t_owners::text[])[a.i] AS owner,
        (@t_versions::bigint[])[a.i] AS version, (@t_to_states::text[])[a.i] AS to_state,
        (@t_new_owners::text[])[a.i] AS new_owner, (@t_leases::interval[])[a.i] AS lease,
        (@t_ttls::interval[])[a.i] AS ttl, (@t_responses::bytea[])[a.i] AS response,
        (@t_responses_omitted::boolean[])[a.i] AS response_omitted, (@t_notes::text[])[a.i] AS note,
        (@t_tokens::text[])[a.i] AS token, a.i
    FROM unnest(@t_scopes::text[]) WITH ORDINALITY AS a(scope, i)
    -- A no-op, for the plan: see the head of this file.
    LIMIT cardinality(@t_scopes::text[])
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
    FROM carg a CROSS JOIN clk
    -- A replay inserts nothing and so draws no version: the row exists.
    WHERE NOT EXISTS (SELECT 1 FROM idem_records x
                      WHERE x.scope = a.scope AND x.operation = a.operation AND x.key = a.key)
    -- In the batch's order (by identity): see the head of this file.
    ORDER BY a.i
    ON CONFLICT (scope, operation, key) DO NOTHING
    RETURNING r.scope, r.operation, r.key, r.version, r.lease_expires_at, r.created_at, r.updated_at
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
        attempts         = CASE WHEN a.to_state = 'PROCESSING' THEN 0 ELSE r.attempts END,
        updated_at       = clk.t,
        xact             = NULL
    FROM targ a CROSS JOIN clk
    WHERE r.scope = a.scope AND r.operation = a.operation AND r.key = a.key
      AND r.state = a.from_state AND r.owner = a.owner AND r.version = a.version
    RETURNING a.i, r.version
)
-- A claimed row carries only what the store chose (version, lease,
-- creation time): the rest is the caller's own arguments, which group.go
-- fills in (as ClaimInsert's caller does), so the batch's reply does not
-- send every request back. The blanks are typed for sqlc.
SELECT 'c'::text AS kind, a.i::bigint AS i, true AS claimed, ''::text AS scope, ''::text AS operation, ''::text AS key,
    NULL::bytea AS fingerprint, ''::text AS state, ''::text AS owner, n.version, n.lease_expires_at,
    NULL::timestamptz AS expires_at, NULL::bytea AS request, NULL::bytea AS response, 0::integer AS takeovers,
    0::integer AS attempts, n.created_at, n.updated_at, ''::text AS token, ''::text AS note, false AS response_omitted,
    (SELECT t FROM clk)::timestamptz AS store_now
FROM ins n
JOIN carg a ON a.scope = n.scope AND a.operation = n.operation AND a.key = n.key
UNION ALL
SELECT 'c', a.i, false, e.scope, e.operation, e.key, e.fingerprint, e.state,
    e.owner, e.version, (CASE WHEN e.state = 'PROCESSING' AND e.xact IS NOT NULL AND idem_xact_ended(e.xact)
        THEN LEAST(e.lease_expires_at, (SELECT t FROM clk)) ELSE e.lease_expires_at END)::timestamptz,
    e.expires_at, e.request, e.response, e.takeovers, e.attempts,
    e.created_at, e.updated_at, e.token, e.note, e.response_omitted,
    (SELECT t FROM clk)::timestamptz
FROM carg a
JOIN idem_records e ON e.scope = a.scope AND e.operation = a.operation AND e.key = a.key
WHERE NOT EXISTS (SELECT 1 FROM ins n
                  WHERE n.scope = a.scope AND n.operation = a.operation AND n.key = a.key)
UNION ALL
-- Completions carry only i and version; the other columns are blank.
SELECT 't', u.i, false, '', '', '', NULL, '', '', u.version, NULL, NULL, NULL, NULL, 0, 0,
    NULL, NULL, '', '', false, NULL
FROM upd u
UNION ALL
SELECT 't', a.i, false, '', '', '', NULL, '', '', e.version, NULL, NULL, NULL, NULL, 0, 0,
    NULL, NULL, '', '', false, NULL
FROM targ a
JOIN idem_records e ON e.scope = a.scope AND e.operation = a.operation AND e.key = a.key
WHERE a.token <> '' AND e.token = a.token
  AND NOT EXISTS (SELECT 1 FROM upd u WHERE u.i = a.i);
