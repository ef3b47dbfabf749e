"""The server API's sequential ``batch`` on an engine that publishes many publications in one
round trip (``BatchBroker``: the Redis engine): each run of consecutive ``publish`` commands is
prepared command by command (parse, channel, payload: the same checks and coded errors as
``ServerApi.publish``) and published with one ``publish_many`` call; any other command ends the
run and is executed alone, so commands still take effect in their order. Replies, error codes
and metrics are those of one ``ServerApi.call`` per command (a command's duration runs from its
preparation to the end of its run's round trip). A malformed command is answered in place
without ending the run (nothing runs for it). Imports nothing but the API's request parser
and the engine's base types; ``ServerApi`` is handed in as an ``Executor``
(gateway/api/inline.py).
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter
from typing import Any

from gateway.api.inline import Executor, publish_reply
from gateway.api.requests import ApiError, parse_publish
from gateway.engine.base import BatchBroker, EngineError, PublishItem
from gateway.protocol import codes

log = logging.getLogger("taskcast.gateway.api")

Result = dict[str, Any]

YIELD_EVERY = 128
"""Commands (and broadcast channels) run back to back before a server API request lets the loop
serve others: commands that complete without suspending (publishes on the memory engine, the
preparation of a publish run) must not hold the loop for every client. A batch of the relay's
default 100 runs in one go."""


class PublishRuns:
    """One sequential batch over a ``BatchBroker``."""

    def __init__(self, api: Executor, broker: BatchBroker, protocol: str) -> None:
        self.api = api
        self.broker = broker
        self.protocol = protocol
        self.metrics = api.node.metrics
        self.timer = self.metrics.api_timer(protocol, "publish")

    async def run(self, commands: list[object]) -> list[Result]:
        replies: list[Result] = []
        pending: list[tuple[int, PublishItem, float]] = []
        for ran, command in enumerate(commands):
            if ran and ran % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # the run so far stays pending: still one round trip
            params = _publish_params(command)
            if params is None:
                if isinstance(command, dict) and len(command) == 1:  # runs: keep the order
                    await self._flush(pending, replies)
                replies.append(await self.api.command(command, self.protocol))
                continue
            started = perf_counter()
            try:
                item = self._prepare(params)
            except ApiError as exc:
                self._error(exc.code, started)
                replies.append({"error": {"code": exc.code, "message": exc.message}})
                continue
            replies.append({})  # filled in by the flush
            pending.append((len(replies) - 1, item, started))
        await self._flush(pending, replies)
        return replies

    def _prepare(self, params: object) -> PublishItem:
        api = self.api
        req = parse_publish(params)
        return api.item(req.channel, api.payload(req.data, req.b64data), req)

    async def _flush(self, pending: list[tuple[int, PublishItem, float]], replies: list[Result]) -> None:
        if not pending:
            return
        results = await self.api.node.publish_many(self.broker, [item for _, item, _ in pending])
        for (index, item, started), result in zip(pending, results, strict=True):
            if isinstance(result, EngineError):
                # The engine logs its outages once per state change; per command only a debug line.
                log.debug("engine error in API publish to %s: %s", item.channel, result)
                self._error(100, started)
                error = codes.ERROR_INTERNAL
                replies[index] = {"error": {"code": error.code, "message": error.message}}
                continue
            self.timer.observe(perf_counter() - started)
            replies[index] = {"publish": publish_reply(result)}
        pending.clear()

    def _error(self, code: int, started: float) -> None:
        self.metrics.api_errors.labels(self.protocol, "publish", str(code)).inc()
        self.timer.observe(perf_counter() - started)


def _publish_params(command: object) -> object | None:
    """The params of a ``{"publish": params}`` command, else None."""
    if isinstance(command, dict) and len(command) == 1 and "publish" in command:
        params: object = command["publish"]
        return params
    return None
