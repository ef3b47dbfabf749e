"""Task creation from a template (seed §3.1): validated against the registries, version 1."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from status_api.domain.errors import forbidden, invalid
from status_api.domain.ingest import DataValidator
from status_api.domain.model import JSON, DataBody, Health, Lifecycle, StepState, TaskState
from status_api.domain.registry import TaskDefinitions


def create_task(
    body: Mapping[str, JSON],
    task_id: str,
    defs: TaskDefinitions,
    validate_data: DataValidator,
    now: datetime,
    coordinator_id: str,
) -> tuple[TaskState, dict[str, StepState]]:
    """Build the version-1 task and its attempt-1 steps from a validated create body; the task is
    bound to ``coordinator_id``, the only coordinator that may report its TASK_* events.

    Raises:
        DomainError: INVALID ``UNKNOWN_OPERATION``, ``DUPLICATE_STEP``, ``UNKNOWN_BUSINESS_STATUS``,
            ``DATA_INVALID``; FORBIDDEN ``PRODUCER_NOT_ALLOWED``.
    """
    initial = body.get("businessStatus") or defs.statuses.initial_code()
    sdef = defs.statuses.statuses.get(initial)
    if sdef is None or not sdef.enabled or sdef.lifecycle is not Lifecycle.PENDING:
        raise invalid("UNKNOWN_BUSINESS_STATUS", f"{initial!r} is not an enabled PENDING status")
    steps: dict[str, StepState] = {}
    for item in body["steps"]:
        op = defs.operations.operations.get(item["operationCode"])
        if op is None or not op.enabled:
            raise invalid("UNKNOWN_OPERATION", f"operationCode {item['operationCode']!r} is not registered")
        if not op.producer_allowed(item["producerId"]):
            raise forbidden("PRODUCER_NOT_ALLOWED", f"{item['producerId']} may not run {op.operation_code}")
        if item["stepId"] in steps:
            raise invalid("DUPLICATE_STEP", f"stepId {item['stepId']} appears twice")
        steps[item["stepId"]] = StepState(
            task_id=task_id,
            step_id=item["stepId"],
            attempt=1,
            operation_code=op.operation_code,
            producer_id=item["producerId"],
            source_seq=0,
            version=1,
            lifecycle=Lifecycle.PENDING,
            business_status=initial,
            health=Health.HEALTHY,
            created_at=now,
            updated_at=now,
        )
    summary = None
    if body.get("summaryData") is not None:
        raw = body["summaryData"]
        errors = validate_data(raw["schema"], raw["value"])
        if errors:
            raise invalid("DATA_INVALID", f"summaryData does not match {raw['schema']}", errors[:10])
        summary = DataBody(raw["schema"], raw["value"])
    task = TaskState(
        id=task_id,
        tenant_id=body["tenantId"],
        owner_id=body["ownerId"],
        project_id=body.get("projectId"),
        product=body["product"],
        task_type=body["taskType"],
        title=body["title"],
        lifecycle=Lifecycle.PENDING,
        business_status=initial,
        status_definition_version=defs.statuses.version,
        operation_definition_version=defs.operations.version,
        attempt=1,
        coordinator_source_seq=0,
        version=1,
        health=Health.HEALTHY,
        created_at=now,
        updated_at=now,
        summary=summary,
        coordinator_id=coordinator_id,
    )
    return task, steps
