DROP TABLE IF EXISTS idem_records;
DROP SEQUENCE IF EXISTS idem_records_version_seq;
DROP FUNCTION IF EXISTS idem_xact_ended(xid8);
