-- pgbench: the statements of a first call (as in queries/records.sql): the claim's insert (ClaimInsert), then the completion's compare-and-set (TransitionCAS).
\set k random(1, 1000000000)
INSERT INTO idem_records AS r (scope, operation, key, fingerprint, state, owner, version, lease_expires_at, expires_at, request, response, takeovers, attempts, created_at, updated_at, token, note, response_omitted)
SELECT 'pgb', 'op', 'k' || :k || '-' || :client_id, '\x0102', 'PROCESSING', 'o', nextval('idem_records_version_seq'), clk.t + interval '30 s', NULL, '\x7b7d', NULL, 0, 0, clk.t, clk.t, '', '', false
FROM (SELECT clock_timestamp() AS t) clk
WHERE NOT EXISTS (SELECT 1 FROM idem_records x WHERE x.scope = 'pgb' AND x.operation = 'op' AND x.key = 'k' || :k || '-' || :client_id)
RETURNING r.version, r.lease_expires_at, r.created_at;
UPDATE idem_records r SET state = 'SUCCESS', owner = '', version = nextval('idem_records_version_seq'), lease_expires_at = NULL, expires_at = clk.t + interval '1 day', response = '\x7b7d', response_omitted = false, note = '', token = 'tok', updated_at = clk.t
FROM (SELECT clock_timestamp() AS t) clk
WHERE r.scope = 'pgb' AND r.operation = 'op' AND r.key = 'k' || :k || '-' || :client_id AND r.state = 'PROCESSING' AND r.owner = 'o'
RETURNING r.version;
