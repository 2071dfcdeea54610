-- pgbench: the floor of a first call, an autocommitted INSERT and UPDATE on the same table.
\set k random(1, 1000000000)
INSERT INTO idem_records (scope, operation, key, fingerprint, state, owner, version, lease_expires_at, request) VALUES ('pgf', 'op', 'k' || :k || '-' || :client_id, '\x0102', 'PROCESSING', 'o', 1, now() + interval '30 s', '\x7b7d') ON CONFLICT DO NOTHING;
UPDATE idem_records SET state = 'SUCCESS', version = 2, lease_expires_at = NULL, expires_at = now() + interval '1 day', response = '\x7b7d' WHERE scope = 'pgf' AND operation = 'op' AND key = 'k' || :k || '-' || :client_id;
