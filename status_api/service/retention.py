"""Event-log retention (seed §3.8, §17: "the timeline … recognises a purged window").

:func:`purge_event_log` deletes ``task_event_log`` entries committed before a bound, as whole
per-task prefixes (``task_version <= v``), so what remains of a timeline is always a suffix and
``GET /api/tasks/{id}/events`` can answer ``purged: true`` with ``oldestAvailableTaskVersion``.
Current state (task, steps), idempotency records and the outbox are untouched. It runs from the
``retention`` option on the reconciler's schedule and from ``taskcast status-api purge-events``.
Must not import starlette.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from status_api.service.context import Decision, ServiceContext
from status_api.storage import repository as repo
from status_api.storage.write import Change


async def purge_event_log(ctx: ServiceContext, older_than: datetime, *, batch_size: int = 500) -> int:
    """Purge entries committed before ``older_than``; one transaction per ``batch_size`` tasks.

    Returns how many entries were committed before the bound (all deleted). Safe beside writers:
    new versions commit after the bound, and a batch deletes only the prefixes it found.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    purged = 0
    while True:

        async def decide(conn: AsyncConnection) -> Decision[tuple[int, int]]:
            prefixes = await repo.purgeable_prefixes(conn, older_than, batch_size)
            now = ctx.clock()
            changes = [Change(at=now, purge=(task_id, version)) for task_id, version, _ in prefixes]
            return Decision(changes, (len(prefixes), sum(n for _, _, n in prefixes)))

        tasks, entries = await ctx.transact(decide)
        purged += entries
        if tasks < batch_size:
            return purged
