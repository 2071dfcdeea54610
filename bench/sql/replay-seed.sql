-- psql: 2,000 finished records (scope 'pgr') for replay-idem.sql and replay-floor.sql; run once before them.
INSERT INTO idem_records (scope, operation, key, fingerprint, state, owner, version, expires_at, request, response)
SELECT 'pgr', 'op', 's' || g, '\x0102', 'SUCCESS', '', nextval('idem_records_version_seq'), now() + interval '1 day', '\x7b7d', '\x7b7d'
FROM generate_series(0, 1999) g
ON CONFLICT DO NOTHING;
