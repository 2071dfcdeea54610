-- pgbench: a replay's statement (Get in queries/records.sql), over the 2,000 keys of replay-seed.sql.
\set k random(0, 1999)
SELECT scope, operation, key, fingerprint, state, owner, version, lease_expires_at, expires_at, request, response, takeovers, attempts, created_at, updated_at, token, note, response_omitted, clock_timestamp()::timestamptz AS store_now
FROM idem_records WHERE scope = 'pgr' AND operation = 'op' AND key = 's' || :k;
