"""Detail-subscription leases of the subscribe proxy (status_api/subscribe_proxy.py): one quota
per gateway connection, kept in the same tables as the token path's sessions
(``realtime_session`` / ``realtime_subscription``) under the key ``proxy:<client id>``.

:func:`acquire` is the atomic check-and-grant: it first upserts the connection's session row,
which takes that row's write lock on MariaDB (and the database's on SQLite, where every write
transaction is ``BEGIN IMMEDIATE``), so concurrent subscribes of one connection run one after
the other and never grant more than ``limit`` live leases. The caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage import sessions
from status_api.storage.tables import realtime_session, realtime_subscription

KEY_PREFIX = "proxy:"


class Grant(StrEnum):
    GRANTED = "granted"
    OVER_QUOTA = "over_quota"
    #: The connection key belongs to another user (a forged or reused client id).
    FOREIGN = "foreign"


def connection_key(client_id: str) -> str:
    return KEY_PREFIX + client_id


async def _lock_connection(
    conn: AsyncConnection, key: str, tenant_id: str, user_id: str, now: datetime, until: datetime
) -> None:
    values = {
        "session_id": key,
        "tenant_id": tenant_id,
        "user_id": user_id,
        "created_at": now,
        "expires_at": until,
    }
    if conn.dialect.name == "sqlite":
        lite = sqlite.insert(realtime_session).values(values)
        stmt: sa.Executable = lite.on_conflict_do_update(
            index_elements=[realtime_session.c.session_id], set_={"expires_at": lite.excluded.expires_at}
        )
    else:
        my = mysql.insert(realtime_session).values(values)
        stmt = my.on_duplicate_key_update(expires_at=my.inserted.expires_at)
    await conn.execute(stmt)


async def acquire(
    conn: AsyncConnection,
    key: str,
    tenant_id: str,
    user_id: str,
    task_id: str,
    now: datetime,
    until: datetime,
    limit: int,
) -> Grant:
    """Grant (or renew) ``key``'s lease on ``task_id`` until ``until`` unless the connection
    already holds ``limit`` other live leases (nothing is written then but the lock). A key owned
    by another user is never granted."""
    await _lock_connection(conn, key, tenant_id, user_id, now, until)
    owner = (
        await conn.execute(
            sa.select(realtime_session.c.tenant_id, realtime_session.c.user_id).where(
                realtime_session.c.session_id == key
            )
        )
    ).one()
    if (owner[0], owner[1]) != (tenant_id, user_id):
        return Grant.FOREIGN
    await conn.execute(
        sa.delete(realtime_subscription).where(
            realtime_subscription.c.session_id == key, realtime_subscription.c.expires_at <= now
        )
    )
    active = await sessions.active_subscriptions(conn, key, now)
    active.discard(task_id)
    if len(active) >= limit:
        return Grant.OVER_QUOTA
    await sessions.put_subscription(conn, key, task_id, until)
    return Grant.GRANTED


async def holds(conn: AsyncConnection, key: str, task_id: str, now: datetime) -> bool:
    """True while ``key`` holds a live lease on ``task_id``."""
    return task_id in await sessions.active_subscriptions(conn, key, now)
