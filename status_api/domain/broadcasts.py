"""Broadcast scopes (seed §6.6): which channel each scope publishes on, who may subscribe, and the
small payload a tenant or system broadcast carries. Pure: no storage, no HTTP, no clock reads.

"The wider the scope, the smaller the payload": a project channel carries task overviews
(``projections.project_message``); a tenant channel maintenance notices and tenant-level batch
progress; the public system channel version and maintenance notices — never task data. Channels are
always built here from the caller's verified identity, never taken from a request.
"""

from __future__ import annotations

from enum import Enum

from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import JSON, UserIdentity
from status_api.domain.projections import project_channel

SYSTEM_CHANNEL = "task_system:public"
BROADCAST_KIND = "broadcast.notice"
SEVERITIES = frozenset({"INFO", "WARNING", "ERROR"})


class Scope(Enum):
    PROJECT = "project"
    TENANT = "tenant"
    SYSTEM = "system"


def tenant_channel(tenant_id: str) -> str:
    return f"task_tenant:{tenant_id}"


def subscribe_channel(user: UserIdentity, scope: Scope, project_id: str | None) -> str:
    """The broadcast channel ``user`` may subscribe to for ``scope``.

    Raises:
        DomainError: INVALID ``PROJECT_REQUIRED`` (project scope without a projectId); FORBIDDEN
            ``NOT_A_PROJECT_MEMBER`` (the projects claim does not list it).
    """
    if scope is Scope.PROJECT:
        if not project_id:
            raise invalid("PROJECT_REQUIRED", "scope project needs projectId")
        if project_id not in user.projects:
            raise DomainError(ErrorKind.FORBIDDEN, "NOT_A_PROJECT_MEMBER", "not a member of this project")
        return project_channel(user.tenant_id, project_id)
    if scope is Scope.TENANT:
        return tenant_channel(user.tenant_id)
    return SYSTEM_CHANNEL


def broadcast_message(
    broadcast_id: str, scope: Scope, notice_type: str, severity: str, message: str, sent_at: str | None
) -> dict[str, JSON]:
    """The payload of a tenant or system broadcast (``schema/json/broadcast.schema.json``)."""
    return {
        "kind": BROADCAST_KIND,
        "schemaVersion": 1,
        "id": broadcast_id,
        "scope": scope.value,
        "type": notice_type,
        "severity": severity,
        "message": message,
        "sentAt": sent_at,
    }
