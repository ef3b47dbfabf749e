"""The server API's synchronous publish path on an engine that publishes without suspending
(``InlineBroker``: the memory engine): ``publish`` and sequential ``batch`` runs of publishes
executed as plain calls, with no coroutine, request dataclass or per-command ``call()`` round.

Behaviour is ``ServerApi.call("publish", ...)``'s, command by command: the same parser
(gateway/api/requests.py; the common ``{"channel", "data"}`` form skips building the request),
the same channel resolution and coded errors (102/107, 104 for a ``batch`` inside a batch or an
unknown method, 107 ``commands[]`` for a malformed command), the same replies and the same
metrics (``api_command_duration`` per command, ``api_errors`` per failure). A batch that holds
anything but publishes and malformed commands is not taken (``takes``): the general executor runs
it. ``ServerApi`` is handed in as an ``Executor`` (the protocol below); this module imports only
the parser and the engine's base types.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from gateway.api.requests import ApiError, bad_request, parse_publish, publish_common
from gateway.engine.base import EngineError, InlineBroker, PublishItem, PublishResult

if TYPE_CHECKING:
    from gateway.api.requests import BroadcastRequest, PublishRequest
    from gateway.config.schema import ChannelOptions
    from gateway.node import Node

Result = dict[str, Any]


class Executor(Protocol):
    """What the publish runs (``InlineApi`` here, ``PublishRuns`` in gateway/api/batch.py) use of
    the executor they serve (``ServerApi``, gateway/api/executor.py): its node, the request
    preparation, the error accounting and, for a command that ends a run, the general path."""

    node: Node

    def channel_options(self, channel: str) -> ChannelOptions: ...

    def payload(self, data: object, b64data: str) -> bytes: ...

    def item(self, channel: str, data: bytes, req: PublishRequest | BroadcastRequest) -> PublishItem: ...

    def failed(self, exc: ApiError | EngineError, protocol: str, method: str) -> ApiError: ...

    async def command(self, command: object, protocol: str) -> Result: ...


def publish_reply(result: PublishResult) -> Result:
    """The ``publish`` result object: the position, when the channel keeps history."""
    position = result.position
    return {} if position is None else {"offset": position.offset, "epoch": position.epoch}


def _error(exc: ApiError) -> Result:
    return {"error": {"code": exc.code, "message": exc.message}}


class InlineApi:
    """``publish`` and sequential all-publish ``batch`` of one ``ServerApi`` over an
    ``InlineBroker``."""

    def __init__(self, api: Executor, broker: InlineBroker) -> None:
        self.api = api
        self.node = api.node
        self.broker = broker
        self.metrics = api.node.metrics

    def publish(self, params: object) -> Result:
        """One ``publish`` (raises the ``ApiError`` to answer; counts nothing)."""
        api = self.api
        node = self.node
        channel = publish_common(params)
        if channel is not None:  # {"channel", "data"}: no request object, default options
            data = api.payload(params["data"], "")  # type: ignore[index]  # kept: exactly sized
            item = node.publish_item(channel, api.channel_options(channel), data)
        else:
            req = parse_publish(params)
            item = api.item(req.channel, api.payload(req.data, req.b64data), req)
        return publish_reply(node.publish_now(self.broker, item))

    def call(self, params: object, protocol: str) -> Result:
        """``ServerApi.call("publish", params)`` (the same metrics and errors). The publication is
        alone in its tick: a personal channel's subscriber is written at once (``Hub.write_now``;
        a batch keeps the per-tick writes, which measured cheaper for bursts)."""
        started = perf_counter()
        hub = self.node.hub
        hub.write_now = True
        try:
            return self.publish(params)
        except (ApiError, EngineError) as exc:
            raise self.api.failed(exc, protocol, "publish") from None
        finally:
            hub.write_now = False
            self.metrics.api_timer(protocol, "publish").observe(perf_counter() - started)

    @staticmethod
    def takes(commands: list[object]) -> bool:
        """Whether ``batch`` runs these commands: each is a publish or malformed (answered in
        place); anything else goes to the general executor."""
        for command in commands:
            if isinstance(command, dict) and len(command) == 1 and "publish" not in command:
                return False
        return True

    def batch(self, commands: list[object], protocol: str) -> list[Result]:
        """Sequential ``batch`` of commands ``takes`` accepted: one reply per command, in order."""
        timer = self.metrics.api_timer(protocol, "publish")
        publish = self.publish
        replies: list[Result] = []
        append = replies.append
        for command in commands:
            if not isinstance(command, dict) or len(command) != 1:
                append(_error(bad_request("commands[]")))
                continue
            started = perf_counter()
            try:
                append({"publish": publish(command["publish"])})
            except (ApiError, EngineError) as exc:
                append(_error(self.api.failed(exc, protocol, "publish")))
            timer.observe(perf_counter() - started)
        return replies
