"""The relay's claim as ONE request on MySQL/MariaDB: the common claim (no backlog) in one round trip.

:func:`outbox_claims.claim_driver` sends a claim as two requests because the lease ``UPDATE`` needs
the ids the locking ``SELECT`` found. Here the server keeps them: the locking reads aggregate the
ids they locked into session variables (``JSON_ARRAYAGG … INTO @…`` over the same
``… ORDER BY … LIMIT n FOR UPDATE SKIP LOCKED`` scans, reading only the index), and the lease
``UPDATE`` (of a literal id list built from them, prepared in the session), the read of the leased
rows (joined to the ids through ``JSON_TABLE``: a primary-key lookup per id), the next-due read and
``COMMIT`` follow in the same multi-statement request:

1. on a poll, the expired-lease scan: ``@tc_take`` = the ids, in lease order;
2. the due probe (up to :data:`outbox_claims.FAST_CLAIM_ROWS` rows): ``@tc_due``, in due order;
3. ``@tc_ids`` = both lists when the probe had room and both fit the claim's limit, else NULL
   (a backlog, or more expired leases than the limit: nothing is leased), and the text of the
   lease ``UPDATE … WHERE id IN (-1, <ids>)``;
4. the deferred mark of earlier published rows, if any (:func:`outbox_claims.claim_driver`'s
   ``mark``; the same statement, guarded by the lease);
5. ``PREPARE`` and ``EXECUTE`` of that lease ``UPDATE`` (status, ``locked_by``, ``locked_at``,
   ``attempts + 1``: the statement of ``outbox_claims``, the same plan as the two-request claim's);
6. ``@tc_ids IS NOT NULL`` and how many of them were expired leases;
7. the leased rows, in the order of ``@tc_ids``;
8. the next-due read; 9. ``COMMIT``.

The session keeps one prepared statement (``tc_lease``), replaced by each claim.

When nothing was leased because of a backlog (3), the request still commits (releasing the probe's
row locks; a mark in it is committed), and the caller claims again through the tier path
(``claim_driver(probe=False)``), exactly as a backlog claim reads the tiers. Rows, order, leases and
SKIP LOCKED are those of :func:`outbox_claims.claim`: expired leases first (oldest lease first),
then due rows in tier order (sorted here, as ``claim_driver`` sorts its probe). The variables are
the session's own (a connection runs one claim at a time) and are overwritten by every claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from status_api.storage import outbox_claims as oc
from status_api.storage.outbox import PROCESSING
from status_api.storage.tables import task_outbox

_c = task_outbox.c


def _ids(stmt: sa.Select[Any], order: str, into: str) -> oc.DriverSQL:
    """``stmt`` (a locking scan selecting ``id`` and its order column) aggregated into ``@into``."""
    inner = oc.DriverSQL(stmt)
    inner.sql = f"SELECT JSON_ARRAYAGG(q.id ORDER BY q.{order}, q.id) INTO @{into} FROM ({inner.sql}) AS q"
    return inner


_TAKE_IDS = _ids(
    oc._locking(
        sa.select(_c.id, _c.locked_at)
        .where(_c.status == PROCESSING, _c.locked_at < sa.bindparam("cutoff"))
        .order_by(_c.locked_at, _c.id)
    ),
    "locked_at",
    "tc_take",
)
_DUE_IDS = _ids(
    oc._locking(sa.select(_c.id, _c.available_at).where(oc._DUE).order_by(_c.available_at, _c.id)),
    "available_at",
    "tc_due",
)
_JSON_IDS = "JSON_TABLE(@tc_ids, '$[*]' COLUMNS (n FOR ORDINALITY, jid BIGINT PATH '$')) AS j"


def _choose(take: bool) -> str:
    """Statement 3: ``@tc_ids`` = the ids to lease (a JSON array), or NULL when the claim must take
    the tier path; ``@tc_lease`` = the lease ``UPDATE`` of exactly those ids, as text (statement 5
    prepares and runs it: a literal ``IN`` list is a primary-key lookup per id, where an ``UPDATE``
    joined to ``JSON_TABLE`` may scan the table and wait on rows other claims hold); ``@tc_me`` and
    ``@tc_at`` its parameters (the relay id, the lease time)."""
    took = "COALESCE(JSON_LENGTH(@tc_take), 0)" if take else "0"
    due = "COALESCE(@tc_due, '[]')"
    both = f"JSON_MERGE_PRESERVE(COALESCE(@tc_take, '[]'), {due})" if take else due
    ids = "COALESCE(@tc_ids, '[]')"
    listed = f"IF(JSON_LENGTH({ids}) > 0, CONCAT(', ', SUBSTRING({ids}, 2, CHAR_LENGTH({ids}) - 2)), '')"
    return (
        f"SET @tc_ids = IF(COALESCE(JSON_LENGTH(@tc_due), 0) < %s AND {took} + "
        f"COALESCE(JSON_LENGTH(@tc_due), 0) <= %s, {both}, NULL); "
        f"SET @tc_lease = CONCAT(%s, {listed}, ')'), @tc_me = %s, @tc_at = %s"
    )


def _lease_sql() -> str:
    """Statement 5's text from ``outbox_claims``' lease ``UPDATE`` (the same SET clause, with its
    constants inlined), up to its ``IN (`` list: ``-1`` (no row) and the ids follow."""
    sql, args = oc._D_LEASE.render({"ids": [], "b_me": "\0me", "b_at": "\0at"})
    head, sep, _ = sql.partition(" WHERE ")
    assert sep and head.startswith("UPDATE task_outbox SET ")
    parts = head.split("%s")
    assert len(parts) == len(args) + 1
    text = parts[0]
    for arg, part in zip(args, parts[1:], strict=True):
        text += ("?" if arg in ("\0me", "\0at") else _literal(arg)) + part
    return f"{text} WHERE task_outbox.id IN (-1"


def _literal(value: Any) -> str:
    """A constant of the lease statement as SQL (its status name, the attempts increment)."""
    if isinstance(value, int):
        return str(value)
    assert isinstance(value, str) and value.isalnum()
    return f"'{value}'"


_LEASE_TEXT = _lease_sql()
_PREPARE = ("PREPARE tc_lease FROM @tc_lease", ())
_EXECUTE = ("EXECUTE tc_lease USING @tc_me, @tc_at", ())
_COLUMNS = str(
    sa.select(*oc._CLAIM_COLUMNS, _c.available_at).compile(dialect=mysql.dialect(paramstyle="format"))
).partition(" \nFROM ")[0]
_ROWS = f"{_COLUMNS} FROM {_JSON_IDS} STRAIGHT_JOIN task_outbox ON task_outbox.id = j.jid ORDER BY j.n"
_LEASED = "SELECT @tc_ids IS NOT NULL, COALESCE(JSON_LENGTH(@tc_take), 0)"


async def claim_one_request(
    cur: oc.DriverCursor,
    relay_id: str,
    limit: int,
    now: datetime,
    *,
    lease_seconds: float | None = None,
    mark: tuple[Sequence[int], datetime] | None = None,
) -> tuple[oc.DriverClaim, bool]:
    """The claim (with its next-due read and an optional deferred ``mark``) in one request,
    committed. Returns the claim and whether it is complete: False when the probe found a backlog
    (or the expired leases and due rows exceed ``limit``) and nothing was leased; the caller then
    claims through the tier path (the mark, if any, is already committed: its count is returned)."""
    room = min(limit, oc.FAST_CLAIM_ROWS)
    take = lease_seconds is not None
    parts: list[oc._Part] = []
    if take:
        parts.append(
            _TAKE_IDS.render({"cutoff": now - timedelta(seconds=lease_seconds or 0.0), "limit": limit})
        )
    else:
        parts.append(("SET @tc_take = NULL", ()))
    parts.append(_DUE_IDS.render({"now": now, "limit": room}))
    parts.append((_choose(take), (room, limit, _LEASE_TEXT, relay_id, now)))
    at_mark = len(parts) + 1  # the choice is two statements (``_choose``)
    if mark is not None and mark[0]:
        parts.append(oc._D_MARK_PUBLISHED.render({"ids": list(mark[0]), "b_me": relay_id, "b_at": mark[1]}))
    parts += [_PREPARE, _EXECUTE]
    parts.append((_LEASED, ()))
    parts.append((_ROWS, ()))
    parts.append(oc._D_NEXT_DUE.render({"now": now}))
    parts.append(oc._COMMIT)
    counts: list[int] = []
    sets = await oc._round_trip(cur, parts, counts)
    oc._committed(cur)
    marked = counts[at_mark] if mark is not None and mark[0] else 0
    (leased, n_take), rows, due_rows = sets[-4][0], sets[-3], sets[-2]
    if not leased:
        return oc.DriverClaim([], None, marked), False
    taken_rows, due = list(rows[: int(n_take)]), list(rows[int(n_take) :])
    due.sort(key=oc._tier_order)
    found = taken_rows + due
    taken = frozenset(int(r[0]) for r in taken_rows)
    next_at = None
    if len(found) < limit:
        value = due_rows[0][0] if due_rows else None
        next_at = value if isinstance(value, datetime) else None
    # The rows were read after the lease UPDATE: their attempts already count this claim.
    return oc.DriverClaim([oc._row(r, taken, attempts_delta=0) for r in found], next_at, marked), True
