"""Server HTTP API (PROTOCOL.md §6): ``POST <http_api.handler_prefix>/<method>``, shaped for
PyPI ``cent`` 5.x. Errors come back as HTTP 200 with an ``error`` object (or HTTP statuses in
``transport`` error mode); a missing or wrong key is 401 with an empty body.

``ServerApi`` is the one executor of every method (and of ``batch``); gateway/api/http.py is its
HTTP adapter and gateway/api/grpc/server.py its gRPC adapter.
This module only parses requests (gateway/api/requests.py, one typed parser) and calls the node;
actions on connections go to every node through the cluster (gateway/cluster.py). Errors are
values of the one catalogue (gateway/protocol/codes.py), raised as a fresh ``ApiError`` each time.
Never imports client.py or app.py.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from time import perf_counter
from typing import Any

from gateway.api.batch import YIELD_EVERY, PublishRuns
from gateway.api.inline import InlineApi, publish_reply
from gateway.api.requests import (
    ApiError,
    BroadcastRequest,
    ChannelRequest,
    ChannelsRequest,
    DisconnectRequest,
    HistoryRequest,
    InfoRequest,
    PublishRequest,
    RefreshRequest,
    RpcRequest,
    SubscribeRequest,
    UnsubscribeRequest,
    bad_request,
    parse,
    parse_publish,
)
from gateway.channels import resolve
from gateway.config.schema import ChannelOptions, Settings
from gateway.engine.base import BatchBroker, EngineError, InlineBroker, PublishItem
from gateway.node import Node
from gateway.protocol import codec, codes
from gateway.protocol.jsonbytes import dumps_kept
from gateway.protocol.messages import StreamPosition

log = logging.getLogger("taskcast.gateway.api")

Result = dict[str, Any]

INLINE_METHODS = frozenset({"publish", "broadcast"})
"""Methods that never suspend on an engine that publishes inline (the memory engine)."""

RESOLVED_CHANNELS = 65536
"""Channel names whose resolution is kept (the cache is emptied when it is full)."""

TRANSPORT_STATUS = {100: 500, 102: 404, 104: 404, 107: 400, 108: 400, 112: 416, 113: 409}
"""HTTP status per error code in ``transport`` error mode (Centrifugo's mapping)."""


@dataclass(frozen=True, slots=True)
class _Method:
    request: type[Any]
    handler: Callable[[Any], Awaitable[Result]]
    parser: Callable[[object], Any] | None = None
    """Builds the typed request (default: ``parse(request, params)``)."""

    def parse(self, params: object) -> Any:
        return parse(self.request, params) if self.parser is None else self.parser(params)


def _b64(name: str, value: str) -> bytes:
    """Standard base64 (Centrifugo's ``b64*`` fields); invalid ⇒ 107."""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise bad_request(f"{name}: invalid base64") from None


def error_obj(exc: ApiError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message}


class ServerApi:
    """The API methods; ``call(method, params)`` parses the params into the method's typed
    request and returns the result object."""

    def __init__(self, node: Node, settings: Settings) -> None:
        self.node = node
        self.settings = settings
        self.methods: dict[str, _Method] = {
            "publish": _Method(PublishRequest, self.publish, parse_publish),
            "broadcast": _Method(BroadcastRequest, self.broadcast),
            "subscribe": _Method(SubscribeRequest, self.subscribe),
            "unsubscribe": _Method(UnsubscribeRequest, self.unsubscribe),
            "disconnect": _Method(DisconnectRequest, self.disconnect),
            "refresh": _Method(RefreshRequest, self.refresh),
            "presence": _Method(ChannelRequest, self.presence),
            "presence_stats": _Method(ChannelRequest, self.presence_stats),
            "history": _Method(HistoryRequest, self.history),
            "history_remove": _Method(ChannelRequest, self.history_remove),
            "channels": _Method(ChannelsRequest, self.channels),
            "info": _Method(InfoRequest, self.info),
            "rpc": _Method(RpcRequest, self.rpc),
        }
        broker = node.broker
        self._inline = bool(getattr(broker, "publishes_inline", False))
        self._resolved: dict[str, ChannelOptions | codes.Error] = {}
        self.inline: InlineApi | None = (
            InlineApi(self, broker) if self._inline and isinstance(broker, InlineBroker) else None
        )
        """The synchronous publish path (gateway/api/inline.py) on an engine that publishes
        without suspending; None on the others."""

    def runs_inline(self, method: str) -> bool:
        """True when ``call(method, ...)`` may complete without suspending (so gateway/api/http.py
        tries it outside a task): publishes on an engine with ``publishes_inline``. A broadcast
        to more than ``YIELD_EVERY`` channels does suspend (to let the loop serve others): the
        inline driver then hands the rest to a task (httpwire/inline.py)."""
        return self._inline and method in INLINE_METHODS

    def runs_inline_batch(self, params: object) -> bool:
        """``runs_inline`` for the params of ``batch``: sequential, and every command inline
        (a batch of more than ``YIELD_EVERY`` commands suspends to let the loop serve others)."""
        if not self._inline:
            return False
        if not isinstance(params, dict) or params.get("parallel"):
            return not isinstance(params, dict)
        commands = params.get("commands")
        if not isinstance(commands, list):
            return True  # answered with an error, nothing runs
        if len(commands) > YIELD_EVERY:
            return False
        return all(
            not isinstance(command, dict) or len(command) != 1 or next(iter(command)) in INLINE_METHODS
            for command in commands
        )

    def channel_options(self, channel: str) -> ChannelOptions:
        return self._options(channel)

    def _options(self, channel: str) -> ChannelOptions:
        """The channel's namespace options (resolved once per channel name: the settings are
        immutable); raises the resolution's 102/107."""
        resolved = self._resolved.get(channel)
        if resolved is None:
            rules = resolve(self.settings, channel)
            resolved = rules if isinstance(rules, codes.Error) else rules.options
            if len(self._resolved) >= RESOLVED_CHANNELS:
                self._resolved.clear()
            self._resolved[channel] = resolved
        if isinstance(resolved, codes.Error):
            raise ApiError(resolved, "channel")
        return resolved

    def _history_options(self, channel: str) -> ChannelOptions:
        opts = self._options(channel)
        if not (opts.history_size > 0 and opts.history_ttl > 0):
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        return opts

    async def call(self, method: str, params: object, *, protocol: str = "http") -> Result:
        """Run one API method (``protocol`` labels the metrics: "http" or "grpc").

        Raises:
            ApiError: with the catalogue error to answer (104 unknown method, 107 bad params, 100
                engine failure, and each method's own).
        """
        inline = self.inline
        if inline is not None and method == "publish":
            return inline.call(params, protocol)
        spec = self.methods.get(method)
        if spec is None:
            raise ApiError(codes.ERROR_NOT_FOUND)
        metrics = self.node.metrics
        started = perf_counter()
        try:
            return await spec.handler(spec.parse(params))
        except (ApiError, EngineError) as exc:
            raise self.failed(exc, protocol, method) from None
        finally:
            metrics.api_timer(protocol, method).observe(perf_counter() - started)

    def failed(self, exc: ApiError | EngineError, protocol: str, method: str) -> ApiError:
        """Count a failed call in ``api_errors`` and return the error to answer (an engine
        failure is 100: the engine logs its outages once per state change, here a debug line)."""
        if isinstance(exc, EngineError):
            log.debug("engine error in API %s: %s", method, exc)
            exc = ApiError(codes.ERROR_INTERNAL)
        self.node.metrics.api_errors.labels(protocol, method, str(exc.code)).inc()
        return exc

    def batch_limit(self, protocol: str) -> int:
        """The most commands one ``batch`` of ``protocol`` ("http" or "grpc") may carry."""
        section = self.settings.grpc_api if protocol == "grpc" else self.settings.http_api
        return section.max_batch_commands

    def check_batch(self, commands: list[object], protocol: str) -> None:
        """Raises:
        ApiError: 107 for more commands than ``batch_limit`` (the whole batch is refused,
            nothing runs)."""
        limit = self.batch_limit(protocol)
        if len(commands) > limit:
            self.node.metrics.api_errors.labels(protocol, "batch", "107").inc()
            raise bad_request(f"commands: more than {limit}")

    def takes_inline(self, commands: list[object], protocol: str) -> bool:
        """Whether a sequential ``batch`` of ``commands`` runs to its end without suspending
        (``InlineApi.batch``): publishes on an inline engine, at most ``YIELD_EVERY`` of them,
        within the batch bound."""
        inline = self.inline
        return (
            inline is not None
            and len(commands) <= min(YIELD_EVERY, self.batch_limit(protocol))
            and inline.takes(commands)
        )

    async def batch(self, commands: list[object], *, parallel: bool, protocol: str = "http") -> list[Result]:
        """``batch``: each command ``{"<method>": params}`` answered in order with
        ``{"<method>": result}`` or ``{"error": ...}``; ``parallel`` runs them concurrently
        (Centrifugo's ``parallel``), else one after another. Every ``YIELD_EVERY`` commands the
        loop serves others.

        Raises:
            ApiError: 107 for a batch of more than ``batch_limit(protocol)`` commands.
        """
        self.check_batch(commands, protocol)
        if parallel:
            return await self._parallel(commands, protocol)
        inline = self.inline
        if inline is not None and inline.takes(commands):
            replies: list[Result] = []
            for start in range(0, len(commands), YIELD_EVERY):
                if start:
                    await asyncio.sleep(0)
                replies += inline.batch(commands[start : start + YIELD_EVERY], protocol)
            return replies
        broker = self.node.broker
        if not self._inline and isinstance(broker, BatchBroker):
            return await PublishRuns(self, broker, protocol).run(commands)
        replies = []
        for ran, command in enumerate(commands, 1):
            replies.append(await self._command(command, protocol))
            if ran % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return replies

    async def _parallel(self, commands: list[object], protocol: str) -> list[Result]:
        """The commands concurrently, started ``YIELD_EVERY`` at a time: each group runs (up to
        its first suspension) in its own loop iteration, so commands that never suspend do not
        all run in one."""
        tasks: list[asyncio.Task[Result]] = []
        try:
            for started, command in enumerate(commands, 1):
                tasks.append(asyncio.ensure_future(self._command(command, protocol)))
                if started % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def command(self, command: object, protocol: str) -> Result:
        return await self._command(command, protocol)

    async def _command(self, command: object, protocol: str) -> Result:
        """One ``batch`` command: ``{"<method>": result}`` or ``{"error": ...}``."""
        if not isinstance(command, dict) or len(command) != 1:
            return {"error": error_obj(bad_request("commands[]"))}
        ((method, method_params),) = command.items()
        try:
            if method == "batch":
                raise ApiError(codes.ERROR_NOT_FOUND)
            return {method: await self.call(method, method_params, protocol=protocol)}
        except ApiError as exc:
            return {"error": error_obj(exc)}

    def payload(self, data: object, b64data: str) -> bytes:
        return self._data(data, b64data)

    @staticmethod
    def _data(data: object, b64data: str) -> bytes:
        """The payload bytes: ``b64data`` decoded (it wins, as in Centrifugo), else ``data`` as
        JSON. Binary payloads reach Protobuf clients as they are and JSON clients unchanged."""
        if b64data:
            return _b64("b64data", b64data)
        return dumps_kept(data)  # kept: history, held queues (jsonbytes.py)

    def item(self, channel: str, data: bytes, req: PublishRequest | BroadcastRequest) -> PublishItem:
        """The prepared publish of ``data`` to ``channel`` with the request's options (raises the
        channel's 102/107)."""
        return self.node.publish_item(
            channel,
            self._options(channel),
            data,
            tags=req.tags,
            skip_history=req.skip_history,
            idempotency_key=req.idempotency_key,
            version=req.version,
            version_epoch=req.version_epoch,
            delta=req.delta,
        )

    async def _publish_one(self, channel: str, data: bytes, req: PublishRequest | BroadcastRequest) -> Result:
        return publish_reply(await self.node.publish_prepared(self.item(channel, data, req)))

    async def publish(self, req: PublishRequest) -> Result:
        return await self._publish_one(req.channel, self._data(req.data, req.b64data), req)

    async def broadcast(self, req: BroadcastRequest) -> Result:
        data = self._data(req.data, req.b64data)
        responses: list[Result] = []
        for n, channel in enumerate(req.channels):
            if n and n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            try:
                if not channel:
                    raise bad_request("channels: empty channel")
                responses.append({"result": await self._publish_one(channel, data, req)})
            except ApiError as exc:
                responses.append({"error": error_obj(exc)})
            except EngineError as exc:
                log.debug("engine error in API broadcast to %s: %s", channel, exc)
                self.node.metrics.api_errors.labels("http", "broadcast", "100").inc()
                responses.append({"error": error_obj(ApiError(codes.ERROR_INTERNAL))})
        return {"responses": responses}

    async def subscribe(self, req: SubscribeRequest) -> Result:
        self._options(req.channel)
        if req.b64info:
            _b64("b64info", req.b64info)
        if req.b64data:
            _b64("b64data", req.b64data)
        await self.node.cluster.user_op(req)
        return {}

    async def unsubscribe(self, req: UnsubscribeRequest) -> Result:
        self._options(req.channel)
        await self.node.cluster.user_op(req)
        return {}

    async def disconnect(self, req: DisconnectRequest) -> Result:
        d = req.disconnect
        if d is not None and d.code and not codes.is_close_code(d.code):
            raise bad_request("disconnect.code: must be in 3000-4999")  # else no close frame
        await self.node.cluster.user_op(req)
        return {}

    async def refresh(self, req: RefreshRequest) -> Result:
        await self.node.cluster.user_op(req)
        return {}

    async def presence(self, req: ChannelRequest) -> Result:
        if not self._options(req.channel).presence:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        entries = await self.node.presence.presence(req.channel)
        return {"presence": {cid: codec.client_info_obj(info) for cid, info in entries.items()}}

    async def presence_stats(self, req: ChannelRequest) -> Result:
        if not self._options(req.channel).presence:
            raise ApiError(codes.ERROR_NOT_AVAILABLE)
        st = await self.node.presence.stats(req.channel)
        return {"num_clients": st.num_clients, "num_users": st.num_users}

    async def history(self, req: HistoryRequest) -> Result:
        opts = self._history_options(req.channel)
        since = StreamPosition(req.since.offset, req.since.epoch) if req.since is not None else None
        if req.reverse and since is not None and since.offset == 0:
            raise bad_request("since: offset 0 with reverse")
        result = await self.node.history(req.channel, opts, since=since, limit=req.limit, reverse=req.reverse)
        if since is not None and since.epoch and since.epoch != result.position.epoch:
            raise ApiError(codes.ERROR_UNRECOVERABLE_POSITION)
        return codec.history_result_obj(result.publications, result.position)

    async def history_remove(self, req: ChannelRequest) -> Result:
        self._history_options(req.channel)
        await self.node.broker.remove_history(req.channel)
        return {}

    async def channels(self, req: ChannelsRequest) -> Result:
        """Active channels across the cluster (a survey of every live node)."""
        counts: dict[str, int] = {}
        for payload in (await self.node.cluster.survey("channels")).values():
            if isinstance(payload, dict):
                for channel, n in payload.items():
                    if isinstance(n, int) and (not req.pattern or fnmatchcase(channel, req.pattern)):
                        counts[channel] = counts.get(channel, 0) + n
        return {"channels": {ch: {"num_clients": n} for ch, n in counts.items()}}

    async def info(self, req: InfoRequest) -> Result:
        return {"nodes": self.node.cluster.nodes()}  # every live node, from the cluster heartbeats

    async def rpc(self, req: RpcRequest) -> Result:
        raise ApiError(codes.ERROR_NOT_FOUND)
