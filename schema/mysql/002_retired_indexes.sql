-- Indexes earlier schema versions created that no query needs any more (status_api/storage/tables.py
-- RETIRED_INDEXES); each cost every write of its table an index update. `taskcast status-api init-db`
-- (and `database.auto_init`) drops them from an existing database; this file does the same for DBAs
-- who apply DDL themselves. Runs after 001 (docker-entrypoint-initdb.d order) and is idempotent on
-- MariaDB (IF EXISTS). MySQL 8.0 has no IF EXISTS here: run the ALTER only where the index exists.

-- A producer's highest task-level sourceSeq reads task_step_event_seq_uk (task_id, step_id, ...).
ALTER TABLE task_event_log DROP INDEX IF EXISTS task_event_producer_idx;
