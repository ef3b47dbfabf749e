"""Tenant and system broadcasts (seed §6.6): an operator's notice is written as one auditable
outbox row in its own transaction and published by the relay like every other row, never sent to
the gateway directly. Must not import starlette."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from status_api.domain.broadcasts import SYSTEM_CHANNEL, Scope, broadcast_message, tenant_channel
from status_api.domain.errors import DomainError, ErrorKind, invalid
from status_api.domain.model import JSON, ServiceIdentity
from status_api.domain.projections import iso
from status_api.domain.sanitize import sanitize_user_message
from status_api.service.context import ServiceContext
from status_api.storage import outbox
from status_api.storage.write import append_outbox_version

MESSAGE_LIMIT = 2000
PROJECTION = {Scope.TENANT: "TENANT_BROADCAST", Scope.SYSTEM: "SYSTEM_BROADCAST"}


async def publish_broadcast(
    ctx: ServiceContext, body: Mapping[str, JSON], caller: ServiceIdentity
) -> dict[str, JSON]:
    """``POST /admin/v1/broadcasts``: one NOTICE-priority outbox row on ``task_tenant:{tenant}`` or
    ``task_system:public`` (never superseded, never conflated).

    Raises:
        DomainError: INVALID ``INVALID_REQUEST``, ``TENANT_REQUIRED``; FORBIDDEN ``TENANT_MISMATCH``
            (a tenant-bound credential naming another tenant), ``SYSTEM_SCOPE_FORBIDDEN`` (a
            tenant-bound credential broadcasting to every tenant).
    """
    ctx.schemas.require("broadcast-create", body)
    scope = Scope(body["scope"])
    if scope is Scope.TENANT:
        tenant = body.get("tenantId") or caller.tenant_id
        if not isinstance(tenant, str):
            raise invalid("TENANT_REQUIRED", "scope tenant needs tenantId (or a tenant-bound credential)")
        if not caller.serves(tenant):
            raise DomainError(
                ErrorKind.FORBIDDEN, "TENANT_MISMATCH", "the credential is bound to another tenant"
            )
        channel = tenant_channel(tenant)
    else:
        if caller.tenant_id is not None:
            raise DomainError(
                ErrorKind.FORBIDDEN,
                "SYSTEM_SCOPE_FORBIDDEN",
                "a tenant-bound credential cannot reach every tenant",
            )
        channel = SYSTEM_CHANNEL
    now = ctx.clock()
    broadcast_id = f"bc-{uuid.uuid4().hex}"
    message = sanitize_user_message(str(body["message"]), MESSAGE_LIMIT)
    payload = broadcast_message(
        broadcast_id, scope, str(body["type"]), str(body.get("severity") or "INFO"), message, iso(now)
    )
    row = outbox.OutboxMessage(channel, PROJECTION[scope], payload, outbox.Priority.NOTICE)
    async with ctx.engine.begin() as conn:
        await append_outbox_version(conn, broadcast_id, 1, [row], now, aggregate_type="broadcast")
    ctx.committed(1)
    return {"broadcastId": broadcast_id, "channel": channel, "sentAt": iso(now), "message": message}
