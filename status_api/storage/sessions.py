"""Realtime sessions and their detail-subscription leases: the quota of seed §6.5, one per user
whichever way a detail is authorised.

A lease *holder* is a row of ``realtime_session``: a realtime session of the token path
(``GET /api/realtime/session``), or a gateway connection of the subscribe proxy (key
``proxy:<client id>``, status_api/storage/proxy_leases.py). Both paths grant through
:func:`grant_detail`, after :func:`lock_user`: the state lives in the database, so every Status API
replica sees the same leases and the checks of one user run one at a time across all of them.
Every function takes an open connection and never commits.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy import RowMapping
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.tables import realtime_session, realtime_subscription, realtime_user_quota


class Grant(StrEnum):
    """What :func:`grant_detail` decided; a refusal names the quota that is full."""

    GRANTED = "granted"
    #: ``max_detail_subscriptions_per_user`` distinct tasks leased over all the user's holders.
    USER_LIMIT = "user"
    #: ``max_detail_subscriptions_per_session`` leases in this holder (session or connection).
    HOLDER_LIMIT = "session"


def upsert(
    conn: AsyncConnection, table: sa.Table, values: dict[str, object], index: list[str], update: list[str]
) -> sa.Executable:
    """INSERT … ON CONFLICT/DUPLICATE KEY UPDATE ``update`` for the dialect in use. On MariaDB it
    takes the row's exclusive lock whether it inserted or updated (READ COMMITTED has no gap locks
    to take instead); on SQLite every write transaction already holds the database's write lock."""
    if conn.dialect.name == "sqlite":
        lite = sqlite.insert(table).values(values)
        return lite.on_conflict_do_update(
            index_elements=[table.c[c] for c in index], set_={c: lite.excluded[c] for c in update}
        )
    my = mysql.insert(table).values(values)
    return my.on_duplicate_key_update({c: my.inserted[c] for c in update})


async def lock_user(conn: AsyncConnection, tenant_id: str, user_id: str, now: datetime) -> None:
    """Take the user's quota lock (its ``realtime_user_quota`` row, created on first use) until the
    transaction ends: every check or change of the user's leases starts here, so they serialise per
    user on every replica, and two of them never lock each other's rows in opposite orders."""
    values = {"tenant_id": tenant_id, "user_id": user_id, "touched_at": now}
    await conn.execute(upsert(conn, realtime_user_quota, values, ["tenant_id", "user_id"], ["touched_at"]))


async def grant_detail(
    conn: AsyncConnection,
    holder: str,
    tenant_id: str,
    user_id: str,
    task_id: str,
    now: datetime,
    until: datetime,
    *,
    per_holder: int,
    per_user: int,
) -> Grant:
    """Grant (or renew) ``holder``'s lease on ``task_id`` until ``until``, unless the user already
    leases ``per_user`` other distinct tasks over all their holders, or ``holder`` already holds
    ``per_holder`` other live leases (nothing is written then). A task held by another of the
    user's holders (an old session after a token refresh, another tab) is not counted twice.
    The caller holds :func:`lock_user` and has checked that ``holder`` belongs to the user."""
    leases = await user_leases(conn, tenant_id, user_id, now)
    tasks = {t for t, _, _ in leases} - {task_id}
    held = {t for t, h, _ in leases if h == holder} - {task_id}
    if len(tasks) >= per_user:
        return Grant.USER_LIMIT
    if len(held) >= per_holder:
        return Grant.HOLDER_LIMIT
    await put_subscription(conn, holder, task_id, until)
    return Grant.GRANTED


async def insert_session(
    conn: AsyncConnection, session_id: str, tenant_id: str, user_id: str, now: datetime, expires_at: datetime
) -> None:
    await conn.execute(
        sa.insert(realtime_session),
        [
            {
                "session_id": session_id,
                "tenant_id": tenant_id,
                "user_id": user_id,
                "created_at": now,
                "expires_at": expires_at,
            }
        ],
    )


async def get_session(conn: AsyncConnection, session_id: str) -> RowMapping | None:
    return (
        (await conn.execute(sa.select(realtime_session).where(realtime_session.c.session_id == session_id)))
        .mappings()
        .first()
    )


async def user_sessions(conn: AsyncConnection, tenant_id: str, user_id: str) -> list[str]:
    """The ids of every holder row of the user (token sessions and proxy connections)."""
    rows = await conn.execute(
        sa.select(realtime_session.c.session_id).where(
            realtime_session.c.tenant_id == tenant_id, realtime_session.c.user_id == user_id
        )
    )
    return [r[0] for r in rows]


async def user_leases(
    conn: AsyncConnection, tenant_id: str, user_id: str, now: datetime
) -> list[tuple[str, str, datetime]]:
    """The user's live detail leases over all sessions: ``(task_id, session_id, expires_at)``."""
    rows = await conn.execute(
        sa.select(
            realtime_subscription.c.task_id,
            realtime_subscription.c.session_id,
            realtime_subscription.c.expires_at,
        )
        .join(realtime_session, realtime_session.c.session_id == realtime_subscription.c.session_id)
        .where(
            realtime_session.c.tenant_id == tenant_id,
            realtime_session.c.user_id == user_id,
            realtime_subscription.c.expires_at > now,
        )
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def purge_expired(conn: AsyncConnection, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` sessions that expired before ``before``, with their leases.
    Returns the number of sessions deleted."""
    ids = [
        r[0]
        for r in await conn.execute(
            sa.select(realtime_session.c.session_id)
            .where(realtime_session.c.expires_at < before)
            .order_by(realtime_session.c.expires_at)
            .limit(limit)
        )
    ]
    if not ids:
        return 0
    await conn.execute(sa.delete(realtime_subscription).where(realtime_subscription.c.session_id.in_(ids)))
    await conn.execute(sa.delete(realtime_session).where(realtime_session.c.session_id.in_(ids)))
    return len(ids)


async def purge_quota_locks(conn: AsyncConnection, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` per-user lock rows untouched since ``before`` (a later check creates
    the row again). Returns the number deleted."""
    keys = (
        await conn.execute(
            sa.select(realtime_user_quota.c.tenant_id, realtime_user_quota.c.user_id)
            .where(realtime_user_quota.c.touched_at < before)
            .order_by(realtime_user_quota.c.touched_at)
            .limit(limit)
        )
    ).all()
    for tenant_id, user_id in keys:
        await conn.execute(
            sa.delete(realtime_user_quota).where(
                realtime_user_quota.c.tenant_id == tenant_id,
                realtime_user_quota.c.user_id == user_id,
                realtime_user_quota.c.touched_at < before,
            )
        )
    return len(keys)


async def active_subscriptions(conn: AsyncConnection, session_id: str, now: datetime) -> set[str]:
    rows = await conn.execute(
        sa.select(realtime_subscription.c.task_id).where(
            realtime_subscription.c.session_id == session_id, realtime_subscription.c.expires_at > now
        )
    )
    return {r[0] for r in rows}


async def put_subscription(
    conn: AsyncConnection, session_id: str, task_id: str, expires_at: datetime
) -> None:
    await conn.execute(
        sa.delete(realtime_subscription).where(
            realtime_subscription.c.session_id == session_id, realtime_subscription.c.task_id == task_id
        )
    )
    await conn.execute(
        sa.insert(realtime_subscription),
        [{"session_id": session_id, "task_id": task_id, "expires_at": expires_at}],
    )


async def delete_subscription(conn: AsyncConnection, session_id: str, task_id: str) -> None:
    await conn.execute(
        sa.delete(realtime_subscription).where(
            realtime_subscription.c.session_id == session_id, realtime_subscription.c.task_id == task_id
        )
    )


async def delete_user_subscription(conn: AsyncConnection, session_ids: list[str], task_id: str) -> None:
    """Free the task's lease in every one of the user's sessions (a refresh opened a new session
    while the old one still held the lease)."""
    if session_ids:
        await conn.execute(
            sa.delete(realtime_subscription).where(
                realtime_subscription.c.session_id.in_(session_ids),
                realtime_subscription.c.task_id == task_id,
            )
        )
