"""SQLAlchemy Core tables of seed §4.6, §4.7, §5 and §5.1, plus the realtime session quota tables.

Mirrors ``schema/mysql/001_status_api.sql``; ``tests/status_api/test_ddl.py`` creates that DDL in
MariaDB and compares it with this metadata. Deviations from the seed, on purpose:

* identifiers are ``VARCHAR(64)`` (the seed uses ``CHAR(36)`` "for readability"; taskcast ids such as
  ``task-8a4d`` or ULID event ids are not all UUIDs);
* ``task.project_id``, ``task/task_step.duration_source``, ``task_step.created_at/progress`` (queue
  duration and progress in detail), ``task_outbox.aggregate_type/priority`` (relay ordering);
* the sourceSeq unique key of ``task_event_log`` includes ``producer_id``: services never share
  counters (seed §3.4);
* ``task.progress_due_at`` (the task's progress window: when its latest progress is published) and
  ``task_operation_definition.progress_min_interval_ms`` (the task type's window);
* ``task.coordinator_id`` (the creating coordinator: only it reports TASK_* events) and
  ``task_event_committed_idx`` (event-log retention finds old rows without a scan);
* :data:`RETIRED_INDEXES`: indexes earlier versions created that no query needs; init-db drops
  them from an existing database (every index costs each write of its table);
* ``execution_token_renewal``: the audit trail of executionToken renewals (long steps);
* ``realtime_user_quota``: the per-user lock row of the detail-subscription quota (seed §6.5).
* ``operator_action``: the audit trail of operators' actions on the outbox (who requeued or
  deleted which DEAD rows, when).
* ``task_outbox.traceparent``: the W3C trace context of the writing transaction when the Status
  API traces (OpenTelemetry), so the relay's publish joins the worker's trace.

All timestamps are naive UTC ``DATETIME(3)``, written from the service's clock.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData()

ID = sa.String(64)
BIGU = sa.BigInteger().with_variant(mysql.BIGINT(unsigned=True), "mysql", "mariadb")
INTU = sa.Integer().with_variant(mysql.INTEGER(unsigned=True), "mysql", "mariadb")
TS = sa.DateTime().with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")
AUTO_PK = (
    sa.BigInteger()
    .with_variant(mysql.BIGINT(unsigned=True), "mysql", "mariadb")
    .with_variant(sa.Integer(), "sqlite")
)

task = sa.Table(
    "task",
    metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("tenant_id", ID, nullable=False),
    sa.Column("owner_id", ID, nullable=False),
    sa.Column("project_id", ID, nullable=True),
    sa.Column("product", sa.String(64), nullable=False),
    sa.Column("task_type", sa.String(128), nullable=False),
    sa.Column("title", sa.String(255), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("status_definition_version", INTU, nullable=False),
    sa.Column("operation_definition_version", INTU, nullable=False),
    sa.Column("attempt", INTU, nullable=False, server_default="1"),
    sa.Column("coordinator_source_seq", BIGU, nullable=False, server_default="0"),
    sa.Column("version", BIGU, nullable=False, server_default="1"),
    sa.Column("health", sa.String(16), nullable=False, server_default="HEALTHY"),
    sa.Column("summary_schema", sa.String(128), nullable=True),
    sa.Column("summary_data", sa.JSON, nullable=True),
    sa.Column("failure_code", sa.String(128), nullable=True),
    sa.Column("failure_message", sa.String(512), nullable=True),
    sa.Column("failed_step_id", sa.String(128), nullable=True),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("started_at", TS, nullable=True),
    sa.Column("finished_at", TS, nullable=True),
    sa.Column("duration_ms", BIGU, nullable=True),
    sa.Column("duration_source", sa.String(32), nullable=True),
    sa.Column("updated_at", TS, nullable=False),
    sa.Column("coordinator_id", sa.String(128), nullable=True),
    #: When the task's latest STEP_PROGRESS version is due for publication (its outbox rows'
    #: ``available_at``): the start of the task's next progress window (docs/task-protocol.md).
    sa.Column("progress_due_at", TS, nullable=True),
    sa.Index("task_owner_updated_idx", "tenant_id", "owner_id", "updated_at", "id"),
    sa.Index("task_project_idx", "tenant_id", "project_id", "updated_at"),
)

task_step = sa.Table(
    "task_step",
    metadata,
    sa.Column("task_id", ID, sa.ForeignKey("task.id", name="task_step_task_fk"), primary_key=True),
    sa.Column("step_id", sa.String(128), primary_key=True),
    sa.Column("attempt", INTU, primary_key=True, autoincrement=False),
    sa.Column("operation_code", sa.String(128), nullable=False),
    sa.Column("service_name", sa.String(128), nullable=False),
    sa.Column("source_seq", BIGU, nullable=False, server_default="0"),
    sa.Column("version", BIGU, nullable=False, server_default="1"),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("health", sa.String(16), nullable=False, server_default="HEALTHY"),
    sa.Column("last_heartbeat_at", TS, nullable=True),
    sa.Column("data_schema", sa.String(128), nullable=True),
    sa.Column("state_data", sa.JSON, nullable=True),
    sa.Column("progress", sa.JSON, nullable=True),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("started_at", TS, nullable=True),
    sa.Column("finished_at", TS, nullable=True),
    sa.Column("duration_ms", BIGU, nullable=True),
    sa.Column("duration_source", sa.String(32), nullable=True),
    sa.Column("error_category", sa.String(64), nullable=True),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("error_retryable", sa.Boolean, nullable=True),
    sa.Column("diagnostics_ref", sa.String(255), nullable=True),
    sa.Column("updated_at", TS, nullable=False),
    sa.Index("task_step_health_idx", "lifecycle_status", "health", "last_heartbeat_at"),
)

task_event_log = sa.Table(
    "task_event_log",
    metadata,
    sa.Column("event_id", ID, primary_key=True),
    sa.Column("task_id", ID, nullable=False),
    sa.Column("task_version", BIGU, nullable=False),
    sa.Column("step_id", sa.String(128), nullable=True),
    sa.Column("operation_code", sa.String(128), nullable=True),
    sa.Column("step_version", BIGU, nullable=True),
    sa.Column("task_attempt", INTU, nullable=False),
    sa.Column("step_attempt", INTU, nullable=True),
    sa.Column("producer_id", sa.String(128), nullable=False),
    sa.Column("source_seq", BIGU, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("business_status", sa.String(64), nullable=False),
    sa.Column("health", sa.String(16), nullable=False),
    sa.Column("data_schema", sa.String(128), nullable=True),
    sa.Column("error_code", sa.String(128), nullable=True),
    sa.Column("occurred_at", TS, nullable=False),
    sa.Column("received_at", TS, nullable=False),
    sa.Column("committed_at", TS, nullable=False),
    sa.Column("duration_ms", BIGU, nullable=True),
    sa.Column("payload", sa.JSON, nullable=True),
    sa.UniqueConstraint("task_id", "task_version", name="task_event_version_uk"),
    sa.UniqueConstraint(
        "task_id", "step_id", "step_attempt", "producer_id", "source_seq", name="task_step_event_seq_uk"
    ),
    sa.Index("task_event_timeline_idx", "task_id", "committed_at", "event_id"),
    sa.Index("task_event_committed_idx", "committed_at"),
)

task_event_dedup = sa.Table(
    "task_event_dedup",
    metadata,
    sa.Column("event_id", ID, primary_key=True),
    sa.Column("task_id", ID, nullable=False),
    sa.Column("payload_hash", sa.String(64), nullable=False),
    sa.Column("result", sa.JSON, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Index("task_event_task_idx", "task_id", "created_at"),
)

task_outbox = sa.Table(
    "task_outbox",
    metadata,
    sa.Column("id", AUTO_PK, primary_key=True, autoincrement=True),
    sa.Column("aggregate_type", sa.String(32), nullable=False, server_default="task"),
    sa.Column("aggregate_id", ID, nullable=False),
    sa.Column("aggregate_version", BIGU, nullable=False),
    sa.Column("channel", sa.String(255), nullable=False),
    sa.Column("projection", sa.String(32), nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, server_default="PENDING"),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    sa.Column("available_at", TS, nullable=False),
    sa.Column("locked_by", sa.String(128), nullable=True),
    sa.Column("locked_at", TS, nullable=True),
    sa.Column("attempts", INTU, nullable=False, server_default="0"),
    sa.Column("last_error", sa.String(1024), nullable=True),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("published_at", TS, nullable=True),
    # The W3C trace context of the transaction that wrote the row (httpwire/tracing.py); NULL
    # unless the Status API traces. Added by init-db's additive upgrade to older tables.
    sa.Column("traceparent", sa.String(55), nullable=True),
    sa.UniqueConstraint(
        "aggregate_id",
        "aggregate_version",
        "channel",
        "projection",
        name="outbox_aggregate_version_channel_uk",
    ),
    sa.Index("outbox_claim_idx", "status", "available_at", "id"),
    sa.Index("outbox_priority_claim_idx", "status", "priority", "id"),
    sa.Index("outbox_lock_timeout_idx", "status", "locked_at"),
)

task_status_definition = sa.Table(
    "task_status_definition",
    metadata,
    sa.Column("tenant_id", ID, primary_key=True),
    sa.Column("product", sa.String(64), primary_key=True),
    sa.Column("task_type", sa.String(128), primary_key=True),
    sa.Column("definition_version", INTU, primary_key=True, autoincrement=False),
    sa.Column("code", sa.String(64), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("lifecycle_status", sa.String(32), nullable=False),
    sa.Column("terminal", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("severity", sa.String(16), nullable=False, server_default="INFO"),
    sa.Column("sort_order", sa.Integer, nullable=False, server_default="0"),
    sa.Column("presentation", sa.JSON, nullable=True),
    sa.Column("allowed_from", sa.JSON, nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
)

task_operation_definition = sa.Table(
    "task_operation_definition",
    metadata,
    sa.Column("tenant_id", ID, primary_key=True),
    sa.Column("product", sa.String(64), primary_key=True),
    sa.Column("task_type", sa.String(128), primary_key=True),
    sa.Column("definition_version", INTU, primary_key=True, autoincrement=False),
    sa.Column("operation_code", sa.String(128), primary_key=True),
    sa.Column("display_name", sa.String(128), nullable=False),
    sa.Column("producer_pattern", sa.String(255), nullable=False),
    sa.Column("allowed_event_types", sa.JSON, nullable=False),
    sa.Column("allowed_data_schemas", sa.JSON, nullable=False),
    sa.Column("summary_fields", sa.JSON, nullable=True),
    sa.Column("failure_policy", sa.String(32), nullable=False),
    sa.Column("max_attempts", INTU, nullable=False, server_default="1"),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    #: The set's ``maxTaskAttempts`` (one value for the whole set, repeated on each of its rows).
    sa.Column("max_task_attempts", INTU, nullable=True),
    #: The set's ``progressMinIntervalMs`` (one value for the whole set, like ``max_task_attempts``).
    sa.Column("progress_min_interval_ms", INTU, nullable=True),
)

realtime_session = sa.Table(
    "realtime_session",
    metadata,
    sa.Column("session_id", ID, primary_key=True),
    sa.Column("tenant_id", ID, nullable=False),
    sa.Column("user_id", ID, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("expires_at", TS, nullable=False),
    sa.Index("realtime_session_user_idx", "tenant_id", "user_id"),
    sa.Index("realtime_session_expires_idx", "expires_at"),
)

realtime_subscription = sa.Table(
    "realtime_subscription",
    metadata,
    sa.Column("session_id", ID, primary_key=True),
    sa.Column("task_id", ID, primary_key=True),
    sa.Column("expires_at", TS, nullable=False),
)

#: One row per user with detail leases: every detail-quota check of the user (subscription token,
#: subscribe proxy, release) first upserts it, which takes its row lock, so the checks of one user
#: run one at a time on every Status API replica (storage/sessions.py ``lock_user``).
realtime_user_quota = sa.Table(
    "realtime_user_quota",
    metadata,
    sa.Column("tenant_id", ID, primary_key=True),
    sa.Column("user_id", ID, primary_key=True),
    sa.Column("touched_at", TS, nullable=False),
    sa.Index("realtime_user_quota_touched_idx", "touched_at"),
)

execution_token_renewal = sa.Table(
    "execution_token_renewal",
    metadata,
    sa.Column("id", AUTO_PK, primary_key=True, autoincrement=True),
    sa.Column("task_id", ID, nullable=False),
    sa.Column("step_id", sa.String(128), nullable=False),
    sa.Column("task_attempt", INTU, nullable=False),
    sa.Column("step_attempt", INTU, nullable=False),
    sa.Column("producer_id", sa.String(128), nullable=False),
    sa.Column("chain_started_at", TS, nullable=False),
    sa.Column("renewed_at", TS, nullable=False),
    sa.Column("expires_at", TS, nullable=False),
    sa.Index("token_renewal_step_idx", "task_id", "step_id", "step_attempt"),
)

operator_action = sa.Table(
    "operator_action",
    metadata,
    sa.Column("id", AUTO_PK, primary_key=True, autoincrement=True),
    sa.Column("operator_id", sa.String(128), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("target", sa.String(1024), nullable=False),
    sa.Column("affected", INTU, nullable=False),
    sa.Column("acted_at", TS, nullable=False),
    sa.Index("operator_action_acted_idx", "acted_at"),
)

#: ``(table, index)`` pairs earlier schema versions created and this one does not: init-db's upgrade
#: drops them where they exist (``schema/mysql/002_retired_indexes.sql`` by hand).
#:
#: * ``task_event_log.task_event_producer_idx (task_id, producer_id, task_attempt, source_seq)``: the
#:   one query it served, a producer's highest task-level sourceSeq
#:   (``repository.last_task_level_seq``: ``task_id = ? AND step_id IS NULL AND producer_id = ? AND
#:   task_attempt = ?``), reads the task's task-level entries through
#:   ``task_step_event_seq_uk (task_id, step_id, …)`` as cheaply; the index cost every accepted event
#:   an index insert.
RETIRED_INDEXES: tuple[tuple[str, str], ...] = (("task_event_log", "task_event_producer_idx"),)
