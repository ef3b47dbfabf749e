-- Taskcast Status API schema for MySQL 8.0 / MariaDB >= 10.6 (InnoDB, utf8mb4).
-- Tables of seed §4.6, §4.7, §5, §5.1 plus the realtime session quota tables.
-- Kept in step with status_api/storage/tables.py by tests/status_api/test_ddl.py.
-- `taskcast status-api init-db` creates (and additively upgrades) the same schema from the metadata;
-- this file is for DBAs who apply DDL themselves. Idempotent: every statement is IF NOT EXISTS.
-- All DATETIME(3) values are UTC.

CREATE TABLE IF NOT EXISTS task (
	id VARCHAR(64) NOT NULL,
	tenant_id VARCHAR(64) NOT NULL,
	owner_id VARCHAR(64) NOT NULL,
	project_id VARCHAR(64),
	product VARCHAR(64) NOT NULL,
	task_type VARCHAR(128) NOT NULL,
	title VARCHAR(255) NOT NULL,
	lifecycle_status VARCHAR(32) NOT NULL,
	business_status VARCHAR(64) NOT NULL,
	status_definition_version INTEGER UNSIGNED NOT NULL,
	operation_definition_version INTEGER UNSIGNED NOT NULL,
	attempt INTEGER UNSIGNED NOT NULL DEFAULT '1',
	coordinator_source_seq BIGINT UNSIGNED NOT NULL DEFAULT '0',
	version BIGINT UNSIGNED NOT NULL DEFAULT '1',
	health VARCHAR(16) NOT NULL DEFAULT 'HEALTHY',
	summary_schema VARCHAR(128),
	summary_data JSON,
	failure_code VARCHAR(128),
	failure_message VARCHAR(512),
	failed_step_id VARCHAR(128),
	created_at DATETIME(3) NOT NULL,
	started_at DATETIME(3),
	finished_at DATETIME(3),
	duration_ms BIGINT UNSIGNED,
	duration_source VARCHAR(32),
	updated_at DATETIME(3) NOT NULL,
	coordinator_id VARCHAR(128),
	progress_due_at DATETIME(3),
	PRIMARY KEY (id),
	KEY task_owner_updated_idx (tenant_id, owner_id, updated_at, id),
	KEY task_project_idx (tenant_id, project_id, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_step (
	task_id VARCHAR(64) NOT NULL,
	step_id VARCHAR(128) NOT NULL,
	attempt INTEGER UNSIGNED NOT NULL,
	operation_code VARCHAR(128) NOT NULL,
	service_name VARCHAR(128) NOT NULL,
	source_seq BIGINT UNSIGNED NOT NULL DEFAULT '0',
	version BIGINT UNSIGNED NOT NULL DEFAULT '1',
	lifecycle_status VARCHAR(32) NOT NULL,
	business_status VARCHAR(64) NOT NULL,
	health VARCHAR(16) NOT NULL DEFAULT 'HEALTHY',
	last_heartbeat_at DATETIME(3),
	data_schema VARCHAR(128),
	state_data JSON,
	progress JSON,
	created_at DATETIME(3) NOT NULL,
	started_at DATETIME(3),
	finished_at DATETIME(3),
	duration_ms BIGINT UNSIGNED,
	duration_source VARCHAR(32),
	error_category VARCHAR(64),
	error_code VARCHAR(128),
	error_message TEXT,
	error_retryable BOOL,
	diagnostics_ref VARCHAR(255),
	updated_at DATETIME(3) NOT NULL,
	PRIMARY KEY (task_id, step_id, attempt),
	CONSTRAINT task_step_task_fk FOREIGN KEY(task_id) REFERENCES task (id),
	KEY task_step_health_idx (lifecycle_status, health, last_heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_event_log (
	event_id VARCHAR(64) NOT NULL,
	task_id VARCHAR(64) NOT NULL,
	task_version BIGINT UNSIGNED NOT NULL,
	step_id VARCHAR(128),
	operation_code VARCHAR(128),
	step_version BIGINT UNSIGNED,
	task_attempt INTEGER UNSIGNED NOT NULL,
	step_attempt INTEGER UNSIGNED,
	producer_id VARCHAR(128) NOT NULL,
	source_seq BIGINT UNSIGNED NOT NULL,
	event_type VARCHAR(64) NOT NULL,
	lifecycle_status VARCHAR(32) NOT NULL,
	business_status VARCHAR(64) NOT NULL,
	health VARCHAR(16) NOT NULL,
	data_schema VARCHAR(128),
	error_code VARCHAR(128),
	occurred_at DATETIME(3) NOT NULL,
	received_at DATETIME(3) NOT NULL,
	committed_at DATETIME(3) NOT NULL,
	duration_ms BIGINT UNSIGNED,
	payload JSON,
	PRIMARY KEY (event_id),
	CONSTRAINT task_event_version_uk UNIQUE (task_id, task_version),
	CONSTRAINT task_step_event_seq_uk UNIQUE (task_id, step_id, step_attempt, producer_id, source_seq),
	KEY task_event_timeline_idx (task_id, committed_at, event_id),
	KEY task_event_committed_idx (committed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_event_dedup (
	event_id VARCHAR(64) NOT NULL,
	task_id VARCHAR(64) NOT NULL,
	payload_hash VARCHAR(64) NOT NULL,
	result JSON NOT NULL,
	created_at DATETIME(3) NOT NULL,
	PRIMARY KEY (event_id),
	KEY task_event_task_idx (task_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_outbox (
	id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	aggregate_type VARCHAR(32) NOT NULL DEFAULT 'task',
	aggregate_id VARCHAR(64) NOT NULL,
	aggregate_version BIGINT UNSIGNED NOT NULL,
	channel VARCHAR(255) NOT NULL,
	projection VARCHAR(32) NOT NULL,
	payload JSON NOT NULL,
	status VARCHAR(16) NOT NULL DEFAULT 'PENDING',
	priority INTEGER NOT NULL DEFAULT '0',
	available_at DATETIME(3) NOT NULL,
	locked_by VARCHAR(128),
	locked_at DATETIME(3),
	attempts INTEGER UNSIGNED NOT NULL DEFAULT '0',
	last_error VARCHAR(1024),
	created_at DATETIME(3) NOT NULL,
	published_at DATETIME(3),
	traceparent VARCHAR(55),
	PRIMARY KEY (id),
	CONSTRAINT outbox_aggregate_version_channel_uk UNIQUE (aggregate_id, aggregate_version, channel, projection),
	KEY outbox_claim_idx (status, available_at, id),
	KEY outbox_lock_timeout_idx (status, locked_at),
	KEY outbox_priority_claim_idx (status, priority, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_status_definition (
	tenant_id VARCHAR(64) NOT NULL,
	product VARCHAR(64) NOT NULL,
	task_type VARCHAR(128) NOT NULL,
	definition_version INTEGER UNSIGNED NOT NULL,
	code VARCHAR(64) NOT NULL,
	display_name VARCHAR(128) NOT NULL,
	lifecycle_status VARCHAR(32) NOT NULL,
	terminal BOOL NOT NULL DEFAULT false,
	severity VARCHAR(16) NOT NULL DEFAULT 'INFO',
	sort_order INTEGER NOT NULL DEFAULT '0',
	presentation JSON,
	allowed_from JSON NOT NULL,
	enabled BOOL NOT NULL DEFAULT true,
	PRIMARY KEY (tenant_id, product, task_type, definition_version, code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS task_operation_definition (
	tenant_id VARCHAR(64) NOT NULL,
	product VARCHAR(64) NOT NULL,
	task_type VARCHAR(128) NOT NULL,
	definition_version INTEGER UNSIGNED NOT NULL,
	operation_code VARCHAR(128) NOT NULL,
	display_name VARCHAR(128) NOT NULL,
	producer_pattern VARCHAR(255) NOT NULL,
	allowed_event_types JSON NOT NULL,
	allowed_data_schemas JSON NOT NULL,
	summary_fields JSON,
	failure_policy VARCHAR(32) NOT NULL,
	max_attempts INTEGER UNSIGNED NOT NULL DEFAULT '1',
	enabled BOOL NOT NULL DEFAULT true,
	max_task_attempts INTEGER UNSIGNED,
	progress_min_interval_ms INTEGER UNSIGNED,
	PRIMARY KEY (tenant_id, product, task_type, definition_version, operation_code)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS realtime_session (
	session_id VARCHAR(64) NOT NULL,
	tenant_id VARCHAR(64) NOT NULL,
	user_id VARCHAR(64) NOT NULL,
	created_at DATETIME(3) NOT NULL,
	expires_at DATETIME(3) NOT NULL,
	PRIMARY KEY (session_id),
	KEY realtime_session_user_idx (tenant_id, user_id),
	KEY realtime_session_expires_idx (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS realtime_subscription (
	session_id VARCHAR(64) NOT NULL,
	task_id VARCHAR(64) NOT NULL,
	expires_at DATETIME(3) NOT NULL,
	PRIMARY KEY (session_id, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS realtime_user_quota (
	tenant_id VARCHAR(64) NOT NULL,
	user_id VARCHAR(64) NOT NULL,
	touched_at DATETIME(3) NOT NULL,
	PRIMARY KEY (tenant_id, user_id),
	KEY realtime_user_quota_touched_idx (touched_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS execution_token_renewal (
	id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	task_id VARCHAR(64) NOT NULL,
	step_id VARCHAR(128) NOT NULL,
	task_attempt INTEGER UNSIGNED NOT NULL,
	step_attempt INTEGER UNSIGNED NOT NULL,
	producer_id VARCHAR(128) NOT NULL,
	chain_started_at DATETIME(3) NOT NULL,
	renewed_at DATETIME(3) NOT NULL,
	expires_at DATETIME(3) NOT NULL,
	PRIMARY KEY (id),
	KEY token_renewal_step_idx (task_id, step_id, step_attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS operator_action (
	id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	operator_id VARCHAR(128) NOT NULL,
	action VARCHAR(64) NOT NULL,
	target VARCHAR(1024) NOT NULL,
	affected INTEGER UNSIGNED NOT NULL,
	acted_at DATETIME(3) NOT NULL,
	PRIMARY KEY (id),
	KEY operator_action_acted_idx (acted_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
