"""Cluster control messages between gateway nodes, carried by the Broker's control channel.

Messages are small JSON objects ``{"op": …, "from": <node uid>, …}``:

* ``node``    — a node's periodic heartbeat with its counts (for ``info``, ``num_nodes``);
* ``user_op`` — a server API action aimed at connections (subscribe, unsubscribe, disconnect,
  refresh) that every node applies to its own connections;
* ``survey`` / ``survey_reply`` — a request that every live node answers (``channels``).

With the memory engine the control channel loops back, so one code path serves one node or many.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

NODE_INFO_INTERVAL_SECONDS = 3.0
NODE_EXPIRE_SECONDS = 3 * NODE_INFO_INTERVAL_SECONDS + 1
SURVEY_TIMEOUT_SECONDS = 2.0


def encode(op: str, sender: str, **fields: Any) -> bytes:
    return orjson.dumps({"op": op, "from": sender, **fields})


def decode(data: bytes) -> dict[str, Any] | None:
    try:
        msg = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return msg if isinstance(msg, dict) and isinstance(msg.get("op"), str) else None


@dataclass(slots=True)
class NodeRegistry:
    """Live nodes by uid, from heartbeats; entries expire without one."""

    clock: Callable[[], float]
    nodes: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)

    def update(self, info: dict[str, Any]) -> None:
        uid = info.get("uid")
        if isinstance(uid, str):
            self.nodes[uid] = (info, self.clock() + NODE_EXPIRE_SECONDS)

    def live(self) -> list[dict[str, Any]]:
        now = self.clock()
        for uid in [uid for uid, (_, exp) in self.nodes.items() if exp <= now]:
            del self.nodes[uid]
        return [info for info, _ in self.nodes.values()]


@dataclass(slots=True)
class Survey:
    """Replies collected for one survey until every expected node answered or time is up."""

    expected: set[str]
    replies: dict[str, Any] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, node: str, payload: Any) -> None:
        self.replies[node] = payload
        if self.expected <= self.replies.keys():
            self.done.set()


class Surveys:
    """Open surveys of this node."""

    def __init__(self) -> None:
        self.pending: dict[str, Survey] = {}

    async def run(
        self,
        expected: set[str],
        send: Callable[[str], Awaitable[None]],
        wait: float = SURVEY_TIMEOUT_SECONDS,
    ) -> dict[str, Any]:
        survey_id = uuid.uuid4().hex
        survey = self.pending[survey_id] = Survey(expected)
        try:
            await send(survey_id)
            if expected:
                try:
                    async with asyncio.timeout(wait):
                        await survey.done.wait()
                except TimeoutError:
                    pass
            return survey.replies
        finally:
            self.pending.pop(survey_id, None)

    def reply(self, survey_id: str, node: str, payload: Any) -> None:
        survey = self.pending.get(survey_id)
        if survey is not None:
            survey.add(node, payload)
