-- pgbench: the floor of a replay, one SELECT by key of what a replay needs, over the 2,000 keys of replay-seed.sql.
\set k random(0, 1999)
SELECT state, fingerprint, response FROM idem_records WHERE scope = 'pgr' AND operation = 'op' AND key = 's' || :k;
