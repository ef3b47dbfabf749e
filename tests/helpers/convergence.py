"""The convergence checker of the fault suite (issue 10): does every client end up showing what the
database says, and did it ever miss something without knowing?

Four independent records are compared, Jepsen style:

* **ground truth** — the database: every committed task version (``task_event_log``) and each
  task's final version (``task``), loaded by ``Truth.load``;
* **the outbox** — ``task_outbox`` rows: which ``(channel, task, version)`` must reach a channel,
  and whether each left the outbox (``Outbox.load``);
* **Redis** — the gateway's streams (``XRANGE`` of ``<prefix>.stream.{ch}``, key layout in
  gateway/engine/redis_keys.py) and their meta hash (``Streams.load``);
* **each client** — a ``ClientLog`` the test client feeds with what the gateway told it
  (subscribe replies, publications with their positions, snapshots it re-read).

Invariants (``Checker``):

* **no silent gap** — within one epoch, a client's publication offsets on a channel are contiguous
  unless the gap was flagged (``recovered=false``, a new epoch, an ``insufficient state`` /
  resubscribe push the client acted on by re-reading the snapshot);
* **no double apply** — the client applies each ``(channel, task, version)`` at most once and no
  ``(channel, epoch, offset)`` is delivered twice;
* **monotonic versions** — per ``(channel, task)`` the applied versions only increase; in the
  database each task's versions are exactly ``1..N``;
* **nothing invented** — every applied version was committed in the database;
* **completeness** — every client that stayed ends at the final version of every task of its
  channels, within a stated time (``Checker.wait_converged`` returns how long healing took).

``ClientLog`` is pure and synchronous; only the ``load`` functions do I/O.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support import scaled

Key = tuple[str, str]  # (channel, task)


def task_version_of(data: Any) -> tuple[str, int] | None:
    """``(task id, version)`` of a publication's data: a ``task.summary`` envelope (``task.id``,
    ``task.version``) or a flat ``{"taskId", "version"}`` (task.detail, the tests' own rows)."""
    if isinstance(data, (bytes, str)):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    task = data.get("task")
    if isinstance(task, dict) and "id" in task and "version" in task:
        return str(task["id"]), int(task["version"])
    if "taskId" in data and "version" in data:
        return str(data["taskId"]), int(data["version"])
    return None


# --- one client's history -----------------------------------------------------------------------


@dataclass
class ClientLog:
    """What one test client was told and applied.

    The client calls ``subscribed`` for every subscribe reply (connect ``subs`` included),
    ``publication`` for every publication (recovered ones first, in reply order), ``flag`` when the
    gateway told it its position is lost (unsubscribe push 2500, disconnect 3010) and ``snapshot``
    when it re-read the authoritative state. ``stayed=False`` exempts it from completeness.
    """

    name: str
    stayed: bool = True
    position: dict[str, tuple[str, int]] = field(default_factory=dict)
    flagged: set[str] = field(default_factory=set)
    gate: dict[Key, int] = field(default_factory=dict)
    applied: list[tuple[str, str, int]] = field(default_factory=list)
    deliveries: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    offsets_seen: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    unrecovered: int = 0
    recovered: int = 0
    snapshots: int = 0

    def subscribed(
        self,
        channel: str,
        *,
        epoch: str,
        offset: int,
        recovered: bool = False,
        was_recovering: bool = False,
        publications: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """A subscribe reply. A new epoch or ``recovered=false`` while recovering flags the channel:
        the client must re-read the snapshot, and the offsets restart from the reply's position."""
        previous = self.position.get(channel)
        if was_recovering and recovered:
            # As the SDKs do: take the reply's position, then apply the recovered publications,
            # which must continue it without a hole (the reply's offset is where they start).
            self.recovered += 1
            if previous is not None and previous[0] != epoch:
                self.violations.append(
                    f"{self.name}: {channel} recovered=true across epochs {previous[0]}→{epoch}"
                )
            self.position[channel] = (epoch, offset)
            for pub in publications:
                self.publication(channel, pub)
            return
        if was_recovering:
            self.unrecovered += 1
        if previous is not None and (was_recovering or previous[0] != epoch):
            self.flagged.add(channel)
            # the stream this client knew is gone (or went backwards): its offsets start afresh
            for key in [k for k in self.offsets_seen if k[0] == channel]:
                del self.offsets_seen[key]
        self.position[channel] = (epoch, offset)

    def flag(self, channel: str) -> None:
        """The gateway told the client its position on ``channel`` is gone (2500 push, 3010)."""
        self.flagged.add(channel)

    def publication(self, channel: str, pub: Mapping[str, Any], *, epoch: str | None = None) -> bool:
        """A publication (``pub`` as on the wire: ``data``, ``offset``). Returns True if applied."""
        offset = int(pub.get("offset") or 0)
        pos = self.position.get(channel)
        if offset and pos is not None:
            current_epoch = epoch or pos[0]
            key = (channel, current_epoch, offset)
            self.offsets_seen[key] += 1
            if self.offsets_seen[key] > 1:
                self.violations.append(f"{self.name}: {channel} offset {offset} delivered twice")
            if current_epoch == pos[0]:
                if offset > pos[1] + 1 and channel not in self.flagged:
                    self.violations.append(
                        f"{self.name}: silent gap on {channel}: offset {pos[1]} then {offset}"
                    )
                if offset > pos[1]:
                    self.position[channel] = (current_epoch, offset)
        found = task_version_of(pub.get("data"))
        if found is None:
            return False
        task, version = found
        self.deliveries[(channel, task, version)] += 1
        return self._apply(channel, task, version)

    def snapshot(self, channel: str, versions: Mapping[str, int]) -> None:
        """The client re-read the authoritative state of ``channel``'s tasks; the flag is cleared."""
        self.snapshots += 1
        self.flagged.discard(channel)
        for task, version in versions.items():
            self._apply(channel, task, version)

    def _apply(self, channel: str, task: str, version: int) -> bool:
        if version <= self.gate.get((channel, task), 0):
            return False  # an old or repeated version: dropped by the version gate (seed §8)
        self.gate[(channel, task)] = version
        self.applied.append((channel, task, version))
        return True

    @property
    def duplicates(self) -> int:
        """Deliveries of a ``(channel, task, version)`` beyond the first (dropped by the gate)."""
        return sum(n - 1 for n in self.deliveries.values() if n > 1)


# --- the independent records --------------------------------------------------------------------


@dataclass
class Truth:
    """Committed task versions from the database."""

    final: dict[str, int] = field(default_factory=dict)
    versions: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    async def load(cls, engine: Any, tasks: Iterable[str] | None = None) -> Truth:
        import sqlalchemy as sa

        from status_api.storage.tables import task, task_event_log

        wanted = list(tasks) if tasks is not None else None
        out = cls()
        async with engine.connect() as conn:
            q = sa.select(task.c.id, task.c.version)
            log_q = sa.select(task_event_log.c.task_id, task_event_log.c.task_version)
            if wanted is not None:
                q = q.where(task.c.id.in_(wanted))
                log_q = log_q.where(task_event_log.c.task_id.in_(wanted))
            for task_id, version in await conn.execute(q):
                out.final[str(task_id)] = int(version)
            versions: dict[str, set[int]] = defaultdict(set)
            for task_id, version in await conn.execute(log_q):
                versions[str(task_id)].add(int(version))
        out.versions = {t: sorted(v) for t, v in versions.items()}
        return out


@dataclass
class Outbox:
    """``task_outbox`` rows: ``(channel, task, version) → status``, one key per publication (a
    task version's one row, ``outbox.VERSION_PROJECTION``: one per channel it carries)."""

    rows: dict[tuple[str, str, int], str] = field(default_factory=dict)

    @classmethod
    async def load(cls, engine: Any, tasks: Iterable[str] | None = None) -> Outbox:
        import sqlalchemy as sa

        from status_api.storage.outbox import VERSION_PROJECTION, decode_publications
        from status_api.storage.tables import task_outbox

        t = task_outbox.c
        version_payload = sa.case((t.projection == VERSION_PROJECTION, sa.type_coerce(t.payload, sa.Text)))
        q = sa.select(t.channel, t.aggregate_id, t.aggregate_version, t.status, version_payload)
        if tasks is not None:
            q = q.where(t.aggregate_id.in_(list(tasks)))
        out = cls()
        async with engine.connect() as conn:
            for channel, task_id, version, status, payload in await conn.execute(q):
                channels = [p.channel for p in decode_publications(payload)] if payload else [channel]
                for c in channels:
                    out.rows[(str(c), str(task_id), int(version))] = str(status)
        return out

    def expected(self, channels: Iterable[str] | None = None) -> dict[Key, int]:
        """The newest version per ``(channel, task)`` the outbox carries."""
        wanted = set(channels) if channels is not None else None
        out: dict[Key, int] = {}
        for channel, task, version in self.rows:
            if wanted is None or channel in wanted:
                out[(channel, task)] = max(out.get((channel, task), 0), version)
        return out


@dataclass
class Streams:
    """The gateway's Redis streams: per channel, its entries ``(offset, task, version)`` and meta."""

    entries: dict[str, list[tuple[int, str | None, int | None]]] = field(default_factory=dict)
    meta: dict[str, tuple[str, int] | None] = field(default_factory=dict)

    @classmethod
    async def load(cls, redis: Any, prefix: str, channels: Iterable[str]) -> Streams:
        from gateway.engine.redis_codec import decode_publication
        from gateway.engine.redis_keys import RedisKeys

        keys = RedisKeys(prefix)
        out = cls()
        for channel in channels:
            items = []
            for entry_id, fields in await redis.xrange(keys.stream(channel)):
                offset = int(entry_id.split(b"-")[0])
                pub = decode_publication(fields[b"d"], offset)
                found = task_version_of(pub.data)
                items.append((offset, found[0] if found else None, found[1] if found else None))
            out.entries[channel] = items
            meta = await redis.hgetall(keys.meta(channel))
            out.meta[channel] = (meta[b"e"].decode(), int(meta.get(b"s", 0))) if meta else None
        return out


# --- the checker --------------------------------------------------------------------------------


@dataclass
class Checker:
    """Checks the invariants over the records it was given; each ``check_*`` returns violations."""

    truth: Truth | None = None
    outbox: Outbox | None = None
    streams: Streams | None = None

    def check_truth(self) -> list[str]:
        out: list[str] = []
        if self.truth is None:
            return out
        for task, versions in self.truth.versions.items():
            if versions != list(range(1, len(versions) + 1)):
                out.append(f"database: task {task} versions are not 1..N: {versions}")
            final = self.truth.final.get(task)
            if final is not None and versions and versions[-1] != final:
                out.append(
                    f"database: task {task} final version {final} but event log ends at {versions[-1]}"
                )
        return out

    def check_outbox(self, *, allow_dead: bool = False) -> list[str]:
        out: list[str] = []
        if self.outbox is None:
            return out
        for key, status in self.outbox.rows.items():
            if status != "PUBLISHED" and not (allow_dead and status == "DEAD"):
                out.append(f"outbox: {key} is {status}, not PUBLISHED")
            if self.truth is not None and key[1] in self.truth.final and key[2] > self.truth.final[key[1]]:
                out.append(f"outbox: {key} is newer than the task's committed version")
        return out

    def check_streams(self) -> list[str]:
        out: list[str] = []
        if self.streams is None:
            return out
        for channel, items in self.streams.entries.items():
            offsets = [o for o, _, _ in items]
            if offsets != list(range(offsets[0], offsets[0] + len(offsets))) if offsets else False:
                out.append(f"redis: {channel} stream offsets not contiguous: {offsets}")
            seen = Counter((t, v) for _, t, v in items if t is not None)
            dup = [k for k, n in seen.items() if n > 1]
            if dup:
                out.append(f"redis: {channel} holds {dup[:3]} more than once (idempotency)")
            meta = self.streams.meta.get(channel)
            if items and (meta is None or meta[1] < offsets[-1]):
                out.append(f"redis: {channel} meta {meta} behind the stream top {offsets[-1]}")
        return out

    def check_client(self, log: ClientLog, expected: Mapping[Key, int] | None = None) -> list[str]:
        """Safety (always) and, when ``expected`` is given and the client stayed, completeness."""
        out = list(log.violations)
        applied = Counter(log.applied)
        out += [f"{log.name}: applied {k} {n} times" for k, n in applied.items() if n > 1]
        last: dict[Key, int] = {}
        for channel, task, version in log.applied:
            if version <= last.get((channel, task), 0):
                out.append(f"{log.name}: {channel}/{task} version went back to {version}")
            last[(channel, task)] = version
            if (
                self.truth is not None
                and task in self.truth.versions
                and version not in self.truth.versions[task]
            ):
                out.append(f"{log.name}: applied {task} v{version}, never committed")
        if expected is not None and log.stayed:
            out += self.missing(log, expected)
        return out

    @staticmethod
    def missing(log: ClientLog, expected: Mapping[Key, int]) -> list[str]:
        return [
            f"{log.name}: {channel}/{task} at v{log.gate.get((channel, task))}, database says v{version}"
            for (channel, task), version in expected.items()
            if log.gate.get((channel, task), 0) != version
        ]

    def assert_ok(self, logs: Iterable[ClientLog], expected: Mapping[Key, int] | None = None) -> None:
        problems = self.check_truth() + self.check_outbox() + self.check_streams()
        for log in logs:
            problems += self.check_client(log, expected)
        assert not problems, "convergence violated:\n  " + "\n  ".join(problems[:20])

    async def wait_converged(
        self,
        logs: Iterable[ClientLog],
        expected: Mapping[Key, int] | Callable[[], Mapping[Key, int]],
        within: float,
    ) -> float:
        """Wait until every client that stayed reached ``expected``; returns the seconds it took.
        Fails with what is still missing after ``within`` seconds (the stated healing bound)."""
        logs = list(logs)
        bound = scaled(within)  # like every bound of the suite (TASKCAST_TEST_TIME_SCALE)
        started = time.monotonic()
        while True:
            want = expected() if callable(expected) else expected
            missing = [m for log in logs if log.stayed for m in self.missing(log, want)]
            if not missing:
                return time.monotonic() - started
            if time.monotonic() - started > bound:
                raise AssertionError(f"not converged within {bound:g}s:\n  " + "\n  ".join(missing[:20]))
            await asyncio.sleep(0.02)  # polling interval of a bounded wait on client state
