"""Versioned status and operation definition sets in the database (seed §4.6, §4.7): load a
tenant's set (falling back to the ``*`` set), insert an immutable new version, list what exists.
Like repository.py, every function takes an open connection and never commits."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.domain.registry import (
    ANY_TENANT,
    OperationDefinitionSet,
    StatusDefinitionSet,
    operation_set_from_json,
    status_set_from_json,
)
from status_api.storage.tables import task_operation_definition, task_status_definition


async def _definition_rows(
    conn: AsyncConnection, table: sa.Table, tenant_id: str, product: str, task_type: str, version: int
) -> tuple[str, list[RowMapping]] | None:
    """The rows of one definition version: the tenant's own, else the ``*`` (all tenants) ones."""
    for tenant in (tenant_id, ANY_TENANT):
        query = sa.select(table).where(
            table.c.tenant_id == tenant,
            table.c.product == product,
            table.c.task_type == task_type,
            table.c.definition_version == version,
        )
        rows = list((await conn.execute(query)).mappings())
        if rows:
            return tenant, rows
    return None


async def load_status_set(
    conn: AsyncConnection, tenant_id: str, product: str, task_type: str, version: int
) -> StatusDefinitionSet | None:
    """The tenant's own definition, else the ``*`` (all tenants) one."""
    found = await _definition_rows(conn, task_status_definition, tenant_id, product, task_type, version)
    if found is not None:
        tenant, rows = found
        if rows:
            return status_set_from_json(
                {
                    "tenantId": tenant,
                    "product": product,
                    "taskType": task_type,
                    "definitionVersion": version,
                    "statuses": [
                        {
                            "code": r["code"],
                            "displayName": r["display_name"],
                            "lifecycleStatus": r["lifecycle_status"],
                            "terminal": bool(r["terminal"]),
                            "severity": r["severity"],
                            "sortOrder": r["sort_order"],
                            "presentation": r["presentation"],
                            "allowedFrom": r["allowed_from"] or [],
                            "enabled": bool(r["enabled"]),
                        }
                        for r in rows
                    ],
                }
            )
    return None


async def load_operation_set(
    conn: AsyncConnection, tenant_id: str, product: str, task_type: str, version: int
) -> OperationDefinitionSet | None:
    found = await _definition_rows(conn, task_operation_definition, tenant_id, product, task_type, version)
    if found is not None:
        tenant, rows = found
        if rows:
            return operation_set_from_json(
                {
                    "tenantId": tenant,
                    "product": product,
                    "taskType": task_type,
                    "definitionVersion": version,
                    "operations": [
                        {
                            "operationCode": r["operation_code"],
                            "displayName": r["display_name"],
                            "producerPattern": r["producer_pattern"],
                            "allowedEventTypes": r["allowed_event_types"],
                            "allowedDataSchemas": r["allowed_data_schemas"] or {},
                            "summaryFields": r["summary_fields"] or {},
                            "failurePolicy": r["failure_policy"],
                            "maxAttempts": r["max_attempts"],
                            "enabled": bool(r["enabled"]),
                        }
                        for r in rows
                    ],
                    "maxTaskAttempts": rows[0]["max_task_attempts"],
                    "progressMinIntervalMs": rows[0]["progress_min_interval_ms"],
                }
            )
    return None


async def insert_status_set(conn: AsyncConnection, s: StatusDefinitionSet) -> None:
    await conn.execute(
        sa.insert(task_status_definition),
        [
            {
                "tenant_id": s.tenant_id,
                "product": s.product,
                "task_type": s.task_type,
                "definition_version": s.version,
                "code": d.code,
                "display_name": d.display_name,
                "lifecycle_status": d.lifecycle.value,
                "terminal": d.terminal,
                "severity": d.severity,
                "sort_order": d.sort_order,
                "presentation": dict(d.presentation) if d.presentation else None,
                "allowed_from": sorted(d.allowed_from),
                "enabled": d.enabled,
            }
            for d in s.statuses.values()
        ],
    )


async def insert_operation_set(conn: AsyncConnection, s: OperationDefinitionSet) -> None:
    await conn.execute(
        sa.insert(task_operation_definition),
        [
            {
                "tenant_id": s.tenant_id,
                "product": s.product,
                "task_type": s.task_type,
                "definition_version": s.version,
                "operation_code": o.operation_code,
                "display_name": o.display_name,
                "producer_pattern": o.producer_pattern,
                "allowed_event_types": sorted(o.allowed_event_types),
                "allowed_data_schemas": {k: sorted(v) for k, v in o.allowed_data_schemas.items()},
                "summary_fields": {k: list(v) for k, v in o.summary_fields.items()},
                "failure_policy": o.failure_policy.value,
                "max_attempts": o.max_attempts,
                "enabled": o.enabled,
                "max_task_attempts": s.max_task_attempts,
                "progress_min_interval_ms": s.progress_min_interval_ms,
            }
            for o in s.operations.values()
        ],
    )


async def list_definition_keys(conn: AsyncConnection) -> dict[str, list[dict[str, Any]]]:
    def keys(t: sa.Table) -> sa.Select[Any]:
        return sa.select(t.c.tenant_id, t.c.product, t.c.task_type, t.c.definition_version).distinct()

    out: dict[str, list[dict[str, Any]]] = {}
    for name, t in (
        ("statusDefinitions", task_status_definition),
        ("operationDefinitions", task_operation_definition),
    ):
        rows = (await conn.execute(keys(t))).all()
        out[name] = [
            {"tenantId": r[0], "product": r[1], "taskType": r[2], "definitionVersion": int(r[3])}
            for r in rows
        ]
    return out
