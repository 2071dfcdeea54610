DROP TABLE IF EXISTS idem_records;
DROP SEQUENCE IF EXISTS idem_records_version_seq;
