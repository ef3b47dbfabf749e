"""The server API's one executor (PROTOCOL.md §6): ``ServerApi`` runs every method's typed
request (gateway/api/requests.py) and every ``batch``, whichever front door parsed it — HTTP
single and ``batch`` and the legacy ``/api`` (gateway/api/http.py), gRPC (gateway/api/grpc/).

A front door parses into a ``Command`` (a typed request, or the ``Refused`` value of one that did
not parse) and calls ``execute`` or ``execute_batch``; replies, errors and metrics
(``api_command_duration`` per command, ``api_errors`` per failure) are therefore the same
through every door. Errors are values of the one catalogue (gateway/protocol/codes.py), raised
as a fresh ``ApiError`` each time. Publishing goes through the node (gateway/node.py), which
takes each engine's fastest path behind the engine seam (a publish that completes without
suspending on the memory engine, one round trip per run of publishes on Redis); the executor
only says whether a publication is alone in its loop tick (``write_now``). The other methods'
handlers are gateway/api/methods.py's (actions on connections go to every node through the
cluster, gateway/cluster.py; the channel reads) and gateway/api/maps.py's. Never imports
gateway/connection/ or app.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from time import perf_counter
from typing import Any

from gateway.api.commands import METHOD_OF, Command, Refused, batch_command, command
from gateway.api.maps import MapApi
from gateway.api.methods import MethodApi
from gateway.api.requests import (
    ApiError,
    BroadcastRequest,
    PublishRequest,
    b64,
    bad_request,
)
from gateway.channels import resolve
from gateway.config.schema import ChannelOptions, Settings
from gateway.engine.base import EngineError, PublishItem, PublishResult
from gateway.node import Node, PublishRun
from gateway.protocol import codes
from gateway.protocol.jsonbytes import dumps_kept
from httpwire.tracing import CHANNEL, OFF, Tracing

log = logging.getLogger("taskcast.gateway.api")

Result = dict[str, Any]

YIELD_EVERY = 128
"""Commands (and broadcast channels) run back to back before a server API request lets the loop
serve others: commands that complete without suspending (publishes on the memory engine, the
preparation of a publish run) must not hold the loop for every client. A batch of the relay's
default 100 runs in one go."""

INLINE_METHODS = frozenset({"publish", "broadcast"})
"""Methods that never suspend on an engine that publishes inline (the memory engine)."""

INLINE_COMMANDS: frozenset[type[Any]] = frozenset({PublishRequest, BroadcastRequest, Refused})
"""The commands of a ``batch`` that never suspends on such an engine (a refused one runs nothing)."""

RESOLVED_CHANNELS = 65536
"""Channel names whose resolution is kept (the cache is emptied when it is full)."""

TRANSPORT_STATUS = {100: 500, 102: 404, 104: 404, 107: 400, 108: 400, 112: 416, 113: 409}
"""HTTP status per error code in ``transport`` error mode (Centrifugo's mapping)."""


_PENDING: Result = {}
"""The reply slot of a publish whose run is not published yet (never answered as it is)."""


def error_obj(exc: ApiError) -> dict[str, Any]:
    return {"code": exc.code, "message": exc.message}


def publish_reply(result: PublishResult) -> Result:
    """The ``publish`` result object: the position, when the channel keeps history."""
    position = result.position
    return {} if position is None else {"offset": position.offset, "epoch": position.epoch}


class ServerApi:
    """The executor of every server API method and of ``batch``."""

    def __init__(self, node: Node, settings: Settings) -> None:
        self.node = node
        self.settings = settings
        self._handlers: dict[type[Any], Callable[[Any], Awaitable[Result]]] = {
            **MethodApi(node, self.channel_options, self._data).handlers(),  # api/methods.py
            **MapApi(node, self.channel_options, self._data).handlers(),  # map methods (api/maps.py)
        }
        """The methods other than ``publish`` and ``broadcast`` (which take the protocol and
        whether the publication is alone in its tick), by request type."""
        self._resolved: dict[str, ChannelOptions | codes.Error] = {}
        self._inline = node.publishes_inline
        #: ``opentelemetry.api`` (:meth:`trace`): every publish is a ``publish`` span (and a
        #: ``batch`` runs its commands one by one, each publish its own span); OFF: nothing.
        self.tracing: Tracing = OFF
        self._traced = False

    def trace(self, tracing: Tracing) -> None:
        """Trace the server API with ``tracing`` (``opentelemetry.api``). A traced request runs in
        a task of its own (a span is a context variable: never driven outside a task)."""
        self.tracing = tracing
        self._traced = tracing.enabled
        if tracing.enabled:
            self._inline = False

    # --- what a front door may ask -----------------------------------------------------------

    def completes_inline(self, method: str) -> bool:
        """True when a command of ``method`` completes without suspending on this node's engine
        (a publish or broadcast on an engine that publishes inline), so gateway/api/http.py lets
        the HTTP protocol drive it outside a task. A broadcast to more than ``YIELD_EVERY``
        channels does suspend (to let the loop serve others): the driver then hands the rest
        to a task (httpwire/inline.py)."""
        return self._inline and method in INLINE_METHODS

    def completes_inline_batch(self, commands: Sequence[Command], *, parallel: bool) -> bool:
        """``completes_inline`` for a ``batch`` of ``commands``: sequential, at most
        ``YIELD_EVERY`` of them, each a publish, a broadcast or refused (answered without
        running)."""
        if parallel or len(commands) > YIELD_EVERY or not self._inline:
            return False
        return INLINE_COMMANDS.issuperset(map(type, commands))

    def batch_limit(self, protocol: str) -> int:
        """The most commands one ``batch`` of ``protocol`` ("http" or "grpc") may carry."""
        section = self.settings.grpc_api if protocol == "grpc" else self.settings.http_api
        return section.max_batch_commands

    def check_batch(self, count: int, protocol: str) -> None:
        """Raises:
        ApiError: 107 for more commands than ``batch_limit`` (the whole batch is refused,
            nothing runs; counted under ``batch``)."""
        limit = self.batch_limit(protocol)
        if count > limit:
            self.node.metrics.api_errors.labels(protocol, "batch", "107").inc()
            raise bad_request(f"commands: more than {limit}")

    def channel_options(self, channel: str) -> ChannelOptions:
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

    # --- the JSON front doors' entry points --------------------------------------------------

    def call(self, method: str, params: object, *, protocol: str = "http") -> Awaitable[Result]:
        """``execute`` of ``method`` with JSON ``params`` (parsed by ``commands.command``)."""
        return self.execute(command(method, params), protocol)

    async def batch(self, commands: list[object], *, parallel: bool, protocol: str = "http") -> list[Result]:
        """``execute_batch`` of JSON ``batch`` commands (each ``{"<method>": params}``), parsed
        one by one as they run.

        Raises:
            ApiError: 107 for more commands than ``batch_limit(protocol)``.
        """
        self.check_batch(len(commands), protocol)
        return await self.execute_batch(map(batch_command, commands), parallel=parallel, protocol=protocol)

    # --- the executor ------------------------------------------------------------------------

    async def execute(self, cmd: Command, protocol: str = "http", *, alone: bool = True) -> Result:
        """Run one command and return its result object (``protocol`` labels the metrics: "http"
        or "grpc"). ``alone``: the command is the only one of its request (not in a batch), so a
        publication's lone local subscriber may be written at once (``PublishItem.write_now``).

        Raises:
            ApiError: with the catalogue error to answer (104 unknown method, 107 bad params,
                100 engine failure, and each method's own).
        """
        kind = type(cmd)
        if kind is Refused:
            raise self._refused(cmd, protocol)  # type: ignore[arg-type]
        method = METHOD_OF[kind]
        started = perf_counter()
        try:
            if kind is PublishRequest:
                req: PublishRequest = cmd  # type: ignore[assignment]
                data = self._data(req.data, req.b64data)
                item = self._item(req.channel, data, req, alone)
                if self._traced:
                    return await self._traced_publish(item, req.channel)
                return publish_reply(await self.node.publish_prepared(item))
            if kind is BroadcastRequest:
                return await self.broadcast(cmd, protocol)  # type: ignore[arg-type]
            return await self._handlers[kind](cmd)
        except (ApiError, EngineError) as exc:
            raise self.failed(exc, protocol, method) from None
        finally:
            self.node.metrics.api_timer(protocol, method).observe(perf_counter() - started)

    async def execute_batch(
        self, commands: Iterable[Command], *, parallel: bool, protocol: str
    ) -> list[Result]:
        """``batch``: each command answered in order with ``{"<method>": result}`` or
        ``{"error": ...}``; ``parallel`` runs them concurrently (Centrifugo's ``parallel``), else
        one after another. ``commands`` is consumed as the batch runs (a door may parse lazily);
        every ``YIELD_EVERY`` commands the loop serves others.

        In a sequential batch each run of consecutive publishes is prepared command by command
        and published through one ``Node.publish_run`` (at once on an engine that publishes
        inline, with one round trip at the end of the run on an engine that batches); any other
        command ends the run and runs alone, so commands take effect in their order. A refused
        command is answered in place without ending the run (nothing runs for it). A publish's
        duration runs from its preparation to its result.
        """
        if parallel:
            return await self._parallel(commands, protocol)
        if self._traced:
            return [await self._reply(cmd, protocol) for cmd in commands]
        replies: list[Result] = []
        run = self.node.publish_run()
        waiting: list[tuple[int, str, float]] = []
        """(reply index, channel, preparation start) of each publication ``run`` holds."""
        timer = self.node.metrics.api_timer(protocol, "publish")
        item, data, clock = self._item, self._data, perf_counter
        for n, cmd in enumerate(commands):
            if n and n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a run's waiting publications stay waiting: one round trip
            kind = type(cmd)
            if kind is PublishRequest:
                req: PublishRequest = cmd  # type: ignore[assignment]
                started = clock()
                try:
                    result = run.add(item(req.channel, data(req.data, req.b64data), req, False))
                except (ApiError, EngineError) as exc:
                    replies.append({"error": error_obj(self.failed(exc, protocol, "publish"))})
                    timer.observe(clock() - started)
                    continue
                if result is None:
                    waiting.append((len(replies), req.channel, started))
                    replies.append(_PENDING)  # replaced when the run is flushed
                else:
                    replies.append({"publish": publish_reply(result)})
                    timer.observe(clock() - started)
            elif kind is Refused:
                replies.append({"error": error_obj(self._refused(cmd, protocol))})  # type: ignore[arg-type]
            else:
                if waiting:
                    await self._flush(run, waiting, replies, protocol)
                replies.append(await self._reply(cmd, protocol))
        if waiting:
            await self._flush(run, waiting, replies, protocol)
        return replies

    async def _flush(
        self, run: PublishRun, waiting: list[tuple[int, str, float]], replies: list[Result], protocol: str
    ) -> None:
        results = await run.flush()
        timer = self.node.metrics.api_timer(protocol, "publish")
        for (index, channel, started), result in zip(waiting, results, strict=True):
            if isinstance(result, EngineError):
                # The engine logs its outages once per state change; per command only a debug line.
                log.debug("engine error in API publish to %s: %s", channel, result)
                error = self.failed(ApiError(codes.ERROR_INTERNAL), protocol, "publish")
                replies[index] = {"error": error_obj(error)}
            else:
                replies[index] = {"publish": publish_reply(result)}
            timer.observe(perf_counter() - started)
        waiting.clear()

    async def _parallel(self, commands: Iterable[Command], protocol: str) -> list[Result]:
        """The commands concurrently, started ``YIELD_EVERY`` at a time: each group runs (up to
        its first suspension) in its own loop iteration, so commands that never suspend do not
        all run in one."""
        tasks: list[asyncio.Task[Result]] = []
        try:
            for started, cmd in enumerate(commands, 1):
                tasks.append(asyncio.ensure_future(self._reply(cmd, protocol)))
                if started % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def _traced_publish(self, item: PublishItem, channel: str) -> Result:
        """One publication as the ``publish`` span: the engine's publish and this node's fan-out
        (attributes: ``centrifugo.channel``, the stream position, ``suppressed`` by an idempotency key)."""
        tracing = self.tracing
        tracing.current_span().set_attribute(CHANNEL, channel)  # Centrifugo's, on the request span
        with tracing.span("publish", attributes={CHANNEL: channel}) as span:
            result = await self.node.publish_prepared(item)
            if result.position is not None:
                span.set_attribute("centrifugo.offset", result.position.offset)
                span.set_attribute("centrifugo.epoch", result.position.epoch)
            span.set_attribute("centrifugo.suppressed", result.suppressed)
            return publish_reply(result)

    async def _reply(self, cmd: Command, protocol: str) -> Result:
        """One ``batch`` command's reply: ``{"<method>": result}`` or ``{"error": ...}``."""
        try:
            result = await self.execute(cmd, protocol, alone=False)
        except ApiError as exc:
            return {"error": error_obj(exc)}
        return {METHOD_OF[type(cmd)]: result}

    def _refused(self, cmd: Refused, protocol: str) -> ApiError:
        """The error answering a command that did not parse (a fresh instance), counted under
        its method when it names one."""
        exc = ApiError(cmd.error.error, cmd.error.detail)
        if cmd.method:
            self.failed(exc, protocol, cmd.method)
            self.node.metrics.api_timer(protocol, cmd.method).observe(0.0)
        return exc

    def failed(self, exc: ApiError | EngineError, protocol: str, method: str) -> ApiError:
        """Count a failed call in ``api_errors`` and return the error to answer (an engine
        failure is 100: the engine logs its outages once per state change, here a debug line)."""
        if isinstance(exc, EngineError):
            log.debug("engine error in API %s: %s", method, exc)
            exc = ApiError(codes.ERROR_INTERNAL)
        self.node.metrics.api_errors.labels(protocol, method, str(exc.code)).inc()
        return exc

    # --- the methods -------------------------------------------------------------------------

    @staticmethod
    def _data(data: object, b64data: str) -> bytes:
        """The payload bytes: ``b64data`` decoded (it wins, as in Centrifugo), else ``data`` as
        JSON. Binary payloads reach Protobuf clients as they are and JSON clients unchanged."""
        if b64data:
            return b64("b64data", b64data)
        return dumps_kept(data)  # kept: history, held queues (jsonbytes.py)

    def _item(
        self, channel: str, data: bytes, req: PublishRequest | BroadcastRequest, write_now: bool
    ) -> PublishItem:
        """The prepared publish of ``data`` to ``channel`` with the request's options (raises the
        channel's 102/107)."""
        opts = self.channel_options(channel)
        if opts.subscription_type != "stream":  # a map channel takes map_publish (Centrifugo: 107)
            raise bad_request("channel: not a stream namespace")
        plain = not (req.tags or req.skip_history or req.idempotency_key or req.version or req.delta)
        if plain and not req.version_epoch:  # the common case: no option lookups
            return self.node.publish_item(channel, opts, data, write_now=write_now)
        return self.node.publish_item(
            channel,
            opts,
            data,
            write_now=write_now,
            tags=req.tags,
            skip_history=req.skip_history,
            idempotency_key=req.idempotency_key,
            version=req.version,
            version_epoch=req.version_epoch,
            delta=req.delta,
        )

    async def broadcast(self, req: BroadcastRequest, protocol: str = "http") -> Result:
        if self._traced:  # Centrifugo's attribute of a broadcast's request span
            self.tracing.current_span().set_attribute("centrifugo.num_channels", len(req.channels))
        data = self._data(req.data, req.b64data)
        node = self.node
        responses: list[Result] = []
        for n, channel in enumerate(req.channels):
            if n and n % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            try:
                if not channel:
                    raise bad_request("channels: empty channel")
                result = await node.publish_prepared(self._item(channel, data, req, False))
                responses.append({"result": publish_reply(result)})
            except ApiError as exc:
                responses.append({"error": error_obj(exc)})
            except EngineError as exc:
                log.debug("engine error in API broadcast to %s: %s", channel, exc)
                node.metrics.api_errors.labels(protocol, "broadcast", "100").inc()
                responses.append({"error": error_obj(ApiError(codes.ERROR_INTERNAL))})
        return {"responses": responses}
