"""Versioned status and operation definitions (seed §4.5–§4.7) as immutable values.

A task binds ``statusDefinitionVersion`` and ``operationDefinitionVersion`` at creation; every later
event is interpreted with exactly those versions, so publishing a new version never changes the
meaning of running or historical tasks. Definitions are keyed by tenant (``*`` = every tenant),
product, task type and version.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from status_api.domain.errors import invalid
from status_api.domain.model import JSON, TERMINAL, FailurePolicy, Lifecycle

ANY_TENANT = "*"


@dataclass(frozen=True, slots=True)
class StatusDef:
    code: str
    display_name: str
    lifecycle: Lifecycle
    terminal: bool
    severity: str = "INFO"
    sort_order: int = 0
    presentation: Mapping[str, JSON] | None = None
    allowed_from: frozenset[str] = frozenset()
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class StatusDefinitionSet:
    tenant_id: str
    product: str
    task_type: str
    version: int
    statuses: Mapping[str, StatusDef]

    def initial_code(self) -> str:
        """The enabled PENDING code with the lowest sort order: a new task's businessStatus."""
        pending = [s for s in self.statuses.values() if s.enabled and s.lifecycle is Lifecycle.PENDING]
        if not pending:
            raise invalid("NO_INITIAL_STATUS", "status definition has no enabled PENDING code")
        return min(pending, key=lambda s: (s.sort_order, s.code)).code


@dataclass(frozen=True, slots=True)
class OperationDef:
    operation_code: str
    display_name: str
    producer_pattern: str
    allowed_event_types: frozenset[str]
    failure_policy: FailurePolicy
    allowed_data_schemas: Mapping[str, frozenset[str]] = field(default_factory=dict)
    summary_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_attempts: int = 1
    enabled: bool = True

    def producer_allowed(self, producer_id: str) -> bool:
        return fnmatch.fnmatchcase(producer_id, self.producer_pattern)


@dataclass(frozen=True, slots=True)
class OperationDefinitionSet:
    tenant_id: str
    product: str
    task_type: str
    version: int
    operations: Mapping[str, OperationDef]
    #: Task attempts a task of this type may reach (``maxTaskAttempts``); None: the server's
    #: ``limits.max_task_attempts``.
    max_task_attempts: int | None = None
    #: The task type's progress window in milliseconds (``progressMinIntervalMs``): at most one
    #: STEP_PROGRESS per task is published per window; None: the server's
    #: ``progress.min_interval_ms``; 0: no window.
    progress_min_interval_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TaskDefinitions:
    """The two definition sets a task is bound to."""

    statuses: StatusDefinitionSet
    operations: OperationDefinitionSet


def status_set_from_json(doc: Mapping[str, JSON]) -> StatusDefinitionSet:
    """Build a set from its file/endpoint form (``schema/json/status-definitions.schema.json``).

    Raises:
        DomainError: ``REGISTRY_INVALID`` when ``terminal`` contradicts the lifecycle, a code repeats or
            ``allowedFrom`` names an unknown code.
    """
    statuses: dict[str, StatusDef] = {}
    for item in doc["statuses"]:
        lifecycle = Lifecycle(item["lifecycleStatus"])
        terminal = bool(item.get("terminal", lifecycle in TERMINAL))
        if terminal != (lifecycle in TERMINAL):
            raise invalid("REGISTRY_INVALID", f"status {item['code']}: terminal contradicts {lifecycle}")
        if item["code"] in statuses:
            raise invalid("REGISTRY_INVALID", f"status {item['code']} defined twice")
        statuses[item["code"]] = StatusDef(
            code=item["code"],
            display_name=item["displayName"],
            lifecycle=lifecycle,
            terminal=terminal,
            severity=item.get("severity", "INFO"),
            sort_order=int(item.get("sortOrder", 0)),
            presentation=item.get("presentation"),
            allowed_from=frozenset(item.get("allowedFrom", ())),
            enabled=bool(item.get("enabled", True)),
        )
    for s in statuses.values():
        unknown = s.allowed_from - statuses.keys()
        if unknown:
            raise invalid("REGISTRY_INVALID", f"status {s.code}: allowedFrom names unknown {sorted(unknown)}")
    return StatusDefinitionSet(
        tenant_id=doc["tenantId"],
        product=doc["product"],
        task_type=doc["taskType"],
        version=int(doc["definitionVersion"]),
        statuses=statuses,
    )


def operation_set_from_json(doc: Mapping[str, JSON]) -> OperationDefinitionSet:
    """Build a set from its file/endpoint form (``schema/json/operation-definitions.schema.json``)."""
    ops: dict[str, OperationDef] = {}
    for item in doc["operations"]:
        if item["operationCode"] in ops:
            raise invalid("REGISTRY_INVALID", f"operation {item['operationCode']} defined twice")
        data = {k: frozenset(v) for k, v in item.get("allowedDataSchemas", {}).items()}
        ops[item["operationCode"]] = OperationDef(
            operation_code=item["operationCode"],
            display_name=item["displayName"],
            producer_pattern=item["producerPattern"],
            allowed_event_types=frozenset(item["allowedEventTypes"]),
            failure_policy=FailurePolicy(item["failurePolicy"]),
            allowed_data_schemas=data,
            summary_fields={k: tuple(v) for k, v in item.get("summaryFields", {}).items()},
            max_attempts=int(item.get("maxAttempts", 1)),
            enabled=bool(item.get("enabled", True)),
        )
    return OperationDefinitionSet(
        tenant_id=doc["tenantId"],
        product=doc["product"],
        task_type=doc["taskType"],
        version=int(doc["definitionVersion"]),
        operations=ops,
        max_task_attempts=int(doc["maxTaskAttempts"]) if doc.get("maxTaskAttempts") is not None else None,
        progress_min_interval_ms=(
            int(doc["progressMinIntervalMs"]) if doc.get("progressMinIntervalMs") is not None else None
        ),
    )


def data_schema_names(s: OperationDefinitionSet) -> set[str]:
    """Every ``data.schema`` an operation set refers to (each must be registered)."""
    return {
        name for op in s.operations.values() for names in op.allowed_data_schemas.values() for name in names
    }
