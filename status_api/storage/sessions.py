"""Realtime sessions and their detail-subscription leases (the ``DETAIL_SUBSCRIPTION_LIMIT``
quota of seed §6.5, per user across all of the user's sessions). Every function takes an open
connection and never commits."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.storage.tables import realtime_session, realtime_subscription


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
        (
            await conn.execute(
                sa.select(realtime_session)
                .where(realtime_session.c.session_id == session_id)
                .with_for_update()
            )
        )
        .mappings()
        .first()
    )


async def lock_user_sessions(conn: AsyncConnection, tenant_id: str, user_id: str) -> list[str]:
    """Lock every session row of the user (id order): quota checks of one user run one at a
    time, whichever session they come from."""
    rows = await conn.execute(
        sa.select(realtime_session.c.session_id)
        .where(realtime_session.c.tenant_id == tenant_id, realtime_session.c.user_id == user_id)
        .order_by(realtime_session.c.session_id)
        .with_for_update()
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
