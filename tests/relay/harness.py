"""Relay test harness: outbox rows, a real gateway's config, a version-de-duplicating subscriber,
in-process relays; relay subprocesses are :class:`tests.support.RelayProcess` (re-exported here).

The subscriber is a raw protocol-v2 WebSocket client whose connection JWT lists its channels
(server-side subscriptions). It records every publication, counts each ``(channel, task, version)``
the first time it arrives ("applied") and ignores the repeats, and keeps a per-(channel, task)
version gate that only moves forward — the two client behaviours the seed requires (§8).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import websockets
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.claim import OutboxLeases, utc_now
from relay.config import RelayConfig, build_config
from relay.publisher import HttpGatewayPublisher
from relay.relay import Relay
from status_api.storage import write
from status_api.storage.outbox import OutboxMessage, Publication, version_message
from status_api.storage.tables import task_outbox
from tests.support import GatewayProcess, mint_token, scaled
from tests.support import RelayProcess as RelayProcess  # re-exported for the relay tests
from tests.support import wait_until as wait_until  # re-exported for the relay tests

SECRET = "relay-tests-secret-0123456789abcdefghij"
HISTORY = {"history_size": 100, "history_ttl": "300s"}
GATEWAY_CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}, "channel_limit": 512},
    "channel": {
        "namespaces": [
            {"name": "task_user", **HISTORY},
            {"name": "task_detail", **HISTORY},
            {"name": "task_project", **HISTORY},
        ]
    },
}
TIMEOUT = 30.0


def user_channel(user: int) -> str:
    return f"task_user:t1/u{user}"


def detail_channel(task: str) -> str:
    return f"task_detail:t1/{task}"


@dataclass(frozen=True)
class RowSpec:
    task: str
    version: int
    channel: str
    priority: int = 0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.channel, self.task, self.version)


def plan(tasks: int, versions: int, users: int = 5) -> list[RowSpec]:
    """``tasks`` x ``versions`` x 2 rows: each version goes to the owner's and the task's channel."""
    out: list[RowSpec] = []
    ids = [f"task-{uuid.uuid4().hex[:12]}" for _ in range(tasks)]
    for v in range(1, versions + 1):
        for i, tid in enumerate(ids):
            out.append(RowSpec(tid, v, user_channel(i % users)))
            out.append(RowSpec(tid, v, detail_channel(tid)))
    return out


def payload(spec: RowSpec) -> dict[str, Any]:
    return {"kind": "test.state", "taskId": spec.task, "version": spec.version}


async def insert(
    engine: AsyncEngine, specs: Iterable[RowSpec], *, now: datetime | None = None, one_row: bool = False
) -> None:
    """Insert PENDING rows through ``write.append_outbox_version`` (one transaction, one call per
    task version): one row per spec (rows of one projection each, as written before VERSION rows
    existed), or with ``one_row`` ONE row per task version carrying its specs' publications
    (``outbox.version_message``, as the Status API writes them; the version's highest priority)."""
    grouped: dict[tuple[str, int], list[OutboxMessage]] = defaultdict(list)
    for s in specs:
        projection = "USER_SUMMARY" if s.channel.startswith("task_user") else "TASK_DETAIL"
        grouped[(s.task, s.version)].append(OutboxMessage(s.channel, projection, payload(s), s.priority))
    when = now or utc_now()
    async with engine.begin() as conn:
        for (task, version), messages in grouped.items():
            if one_row:
                pubs = [Publication(m.channel, m.projection, m.payload) for m in messages]
                messages = [version_message(pubs, max(m.priority for m in messages))]
            await write.append_outbox_version(conn, task, version, messages, when)


async def statuses(engine: AsyncEngine) -> Counter[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(task_outbox.c.status, sa.func.count()).group_by(task_outbox.c.status)
        )
        return Counter({r[0]: int(r[1]) for r in rows})


@dataclass
class Subscriber:
    """A raw WebSocket subscriber (server-side subscriptions from the token's ``channels`` claim)."""

    gateway: GatewayProcess
    channels: list[str]
    received: list[tuple[str, str, int, dict[str, str]]] = field(default_factory=list)
    applied: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    duplicates: int = 0
    gate: dict[tuple[str, str], int] = field(default_factory=dict)
    gate_applied: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    _task: asyncio.Task[None] | None = None
    _ws: Any = None

    async def __aenter__(self) -> Subscriber:
        token = mint_token(SECRET, "watcher", exp_in=600, channels=self.channels)
        self._ws = await websockets.connect(self.gateway.ws_url, open_timeout=scaled(30), max_size=None)
        await self._ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
        reply = json.loads((await self._ws.recv()).split("\n")[0])
        assert "connect" in reply, reply
        subs = reply["connect"].get("subs", {})
        assert set(subs) == set(self.channels), f"subscribed to {len(subs)} of {len(self.channels)}"
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._ws.close()

    async def _read(self) -> None:
        async for frame in self._ws:
            for line in str(frame).split("\n"):
                if not line.strip():
                    continue
                msg = json.loads(line)
                if msg == {}:
                    await self._ws.send("{}")  # pong
                    continue
                pub = msg.get("push", {}).get("pub")
                if pub is not None:
                    self._on_pub(msg["push"]["channel"], pub)

    def _on_pub(self, channel: str, pub: dict[str, Any]) -> None:
        data = pub["data"]
        if data.get("kind") == "task.summary":  # a real Status API envelope (seed §6.1)
            task, version = str(data["task"]["id"]), int(data["task"]["version"])
        else:  # task.detail and the tests' own rows
            task, version = str(data["taskId"]), int(data["version"])
        self.received.append((channel, task, version, dict(pub.get("tags") or {})))
        key = (channel, task, version)
        if self.applied[key]:
            self.duplicates += 1  # same (task, version) again: dropped by the client
        else:
            self.applied[key] += 1
        if version > self.gate.get((channel, task), 0):
            self.gate[(channel, task)] = version
            self.gate_applied[(channel, task)].append(version)

    def has_all(self, specs: Iterable[RowSpec]) -> bool:
        return all(self.applied[s.key] for s in specs)

    def assert_exactly_once(self, specs: Iterable[RowSpec]) -> None:
        specs = list(specs)
        missing = [s.key for s in specs if not self.applied[s.key]]
        assert not missing, f"{len(missing)} rows never reached the client, e.g. {missing[:3]}"
        assert all(n == 1 for n in self.applied.values())
        assert set(self.applied) == {s.key for s in specs}, "the client applied something never written"

    def assert_gate_monotonic(self, specs: Iterable[RowSpec]) -> None:
        newest: dict[tuple[str, str], int] = {}
        for s in specs:
            newest[(s.channel, s.task)] = max(newest.get((s.channel, s.task), 0), s.version)
        for key, seq in self.gate_applied.items():
            assert seq == sorted(set(seq)), f"{key}: versions applied out of order {seq}"
        assert self.gate == newest, "the client's final versions are not the newest committed ones"


async def crashed_relay_rows(
    engine: AsyncEngine, now: Callable[[], datetime], tasks: int = 2
) -> list[RowSpec]:
    """Rows a relay ("crashed-relay", 2 s leases on the clock ``now``) claimed and died holding."""
    crashed = OutboxLeases(engine, "crashed-relay", lease_seconds=2.0, now=now)
    held = plan(tasks=tasks, versions=1)
    await insert(engine, held, now=now())
    assert len(await crashed.claim(100)) == len(held)
    return held


def relay_config(db_url: str, gateway: GatewayProcess, **overrides: Any) -> RelayConfig:
    raw: dict[str, Any] = {
        "database_url": db_url,
        "gateway_api_url": gateway.api_url,
        "gateway_api_key": gateway.api_key,
        "relay_id": f"relay-{uuid.uuid4().hex[:6]}",
        "batch_size": 50,
        "concurrency": 1,
        "poll_interval_seconds": 0.1,
        # Bounds, not the subject of these tests (takeover tests hold their own short leases or
        # move the clock): on a loaded machine a 1 s publish timed out and a 2 s lease expired
        # while its batch was still being published, so another replica claimed the rows again.
        "lease_seconds": scaled(30.0),
        "publish_timeout_seconds": scaled(10.0),
        "backoff_base_seconds": 0.01,
        "backoff_max_seconds": 0.05,
        "stats_interval_seconds": 0.2,
    }
    raw.update(overrides)
    return build_config(raw)


def make_relay(engine: AsyncEngine, cfg: RelayConfig, now: Callable[[], Any] = utc_now, **kw: Any) -> Relay:
    leases = OutboxLeases(engine, cfg.relay_id, lease_seconds=cfg.lease_seconds, now=now)
    publisher = HttpGatewayPublisher(cfg.gateway_api_url, cfg.gateway_api_key, cfg.publish_timeout_seconds)
    return Relay(leases, publisher, cfg, **kw)


async def drain(relay: Relay, limit: int = 10_000) -> int:
    """Call ``run_once`` until nothing is due; returns the rows handled."""
    total = 0
    for _ in range(limit):
        n = await relay.run_once()
        if n == 0:
            return total
        total += n
    raise AssertionError("drain did not finish")
