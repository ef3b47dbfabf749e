"""Detail-subscription leases of the subscribe proxy (status_api/subscribe_proxy.py): each gateway
connection is a lease holder in the token path's tables (``realtime_session`` /
``realtime_subscription``) under the key ``proxy:<client id>``, so the per-user quota counts the
proxy's grants and the token path's together (storage/sessions.py).

:func:`acquire` is the atomic check-and-grant: the user's quota lock first, then the connection's
row (created on its first subscribe, its expiry pushed to the newest lease), then
:func:`sessions.grant_detail`. The caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage import sessions
from status_api.storage.tables import realtime_session, realtime_subscription

KEY_PREFIX = "proxy:"


class Refusal(StrEnum):
    #: The connection key belongs to another user (a forged or reused client id).
    FOREIGN = "foreign"


def connection_key(client_id: str) -> str:
    return KEY_PREFIX + client_id


async def acquire(
    conn: AsyncConnection,
    key: str,
    tenant_id: str,
    user_id: str,
    task_id: str,
    now: datetime,
    until: datetime,
    *,
    per_connection: int,
    per_user: int,
) -> sessions.Grant | Refusal:
    """Grant (or renew) ``key``'s lease on ``task_id`` until ``until`` within the connection's and
    the user's quota (:func:`sessions.grant_detail`). A key owned by another user is never
    granted."""
    await sessions.lock_user(conn, tenant_id, user_id, now)
    values = {
        "session_id": key,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "created_at": now,
        "expires_at": until,
    }
    await conn.execute(sessions.upsert(conn, realtime_session, values, ["session_id"], ["expires_at"]))
    owner = (
        await conn.execute(
            sa.select(realtime_session.c.tenant_id, realtime_session.c.user_id).where(
                realtime_session.c.session_id == key
            )
        )
    ).one()
    if (owner[0], owner[1]) != (tenant_id, user_id):
        return Refusal.FOREIGN
    await conn.execute(
        sa.delete(realtime_subscription).where(
            realtime_subscription.c.session_id == key, realtime_subscription.c.expires_at <= now
        )
    )
    return await sessions.grant_detail(
        conn, key, tenant_id, user_id, task_id, now, until, per_holder=per_connection, per_user=per_user
    )
