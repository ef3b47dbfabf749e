"""Realtime sessions and their detail-subscription leases (the ``DETAIL_SUBSCRIPTION_LIMIT``
quota of seed §6.5). Every function takes an open connection and never commits."""

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
