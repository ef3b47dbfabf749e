"""A real application backend implementing every Centrifugo proxy, over HTTP (a Starlette app
served by uvicorn on a free port) and gRPC (a grpcio aio ``CentrifugoProxy`` server), with one
decision function behind both. Tests pick a per-kind behaviour (``Backend.mode``) and read the
recorded requests.

Behaviours: ``ok`` (the contract below), ``error`` (an ``error`` reply, code 1000), ``disconnect``
(a ``disconnect`` reply, code 4501), ``status`` (HTTP 500 / gRPC INTERNAL), ``garbage`` (a body
that is not JSON / an unreadable result), ``hang`` (never answers until the test ends), ``raw``
(``Backend.raw[kind]`` as it is: out-of-range values), ``huge`` (a well-formed answer of
``huge_size`` bytes, streamed without a length over HTTP), ``redirect`` (HTTP 307).

``ok``: connect needs a ``session=<user>`` cookie (else disconnect 4501) and answers the user,
info, data, meta and (for user ``subs``) a server-side subscription; subscribe answers info/data
and an override; publish replaces data by ``{"modified": true, "original": <data>}``; map publish
does the same, writes the key ``b:<key>`` tagged ``{"via": "proxy"}``, and map remove removes
``b:<key>`` (the map key ``refuse`` is answered with the ``error`` behaviour); rpc echoes;
refresh / sub_refresh extend by ``refresh_ttl`` seconds (``expired`` when ``expire`` is set).

Subscribe streams (gRPC ``SubscribeUnidirectional`` / ``SubscribeBidirectional``): the first
message per ``stream_mode``, then what the test puts into ``feed(channel, cookie)``; a
bidirectional stream echoes each publication the gateway writes into it as ``{"echo": data}``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import orjson
import uvicorn
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gateway.proxy import proxy_pb2 as pb
from gateway.proxy import proxy_pb2_grpc as pb_grpc
from tests.support.procs import free_port
from tests.support.waiting import wait_until

KINDS = (
    "connect",
    "refresh",
    "subscribe",
    "publish",
    "rpc",
    "sub_refresh",
    "shared_poll_refresh",
    "map_publish",
    "map_remove",
)


@dataclass
class Call:
    kind: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Backend:
    mode: dict[str, str] = field(default_factory=lambda: dict.fromkeys(KINDS, "ok"))
    calls: list[Call] = field(default_factory=list)
    refresh_ttl: int = 3600
    connect_ttl: int = 0
    sub_ttl: int = 0
    expire: bool = False
    hang: asyncio.Event = field(default_factory=asyncio.Event)
    status_code: int = 500
    """The HTTP status of the ``status`` behaviour."""
    huge_size: int = 20 * 1024 * 1024
    """The ``huge`` behaviour: a well-formed result whose ``data`` is a JSON string this long."""
    redirect_to: str = ""
    """The ``redirect`` behaviour: HTTP 307 to this URL (gRPC has no redirects)."""
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per kind, the answer object of the ``raw`` behaviour, sent as it is (hostile values)."""
    stream_mode: str = "ok"
    """Subscribe streams: ``ok``, ``error``, ``disconnect``, ``silent`` (never a first message)."""
    feeds: dict[str, asyncio.Queue[bytes | None]] = field(default_factory=dict)
    """Per channel and cookie (``feed``): publications a test pushes into that open stream
    (None ends it cleanly, b"abort" ends it with a gRPC error)."""
    stream_requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    """(method, subscribe request, metadata) of each stream opened."""
    streams_closed: list[str] = field(default_factory=list)
    """Channels whose stream ended on the backend side (the gateway cancelled, or it ended)."""
    stream_published: list[tuple[str, Any]] = field(default_factory=list)
    """(channel, data) the gateway wrote into bidirectional streams."""
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Shared poll: per key, ``{"version", "data"}`` or ``{"removed": True}`` (answered once,
    then forgotten); a key absent is left out of the answer."""
    epoch: str = ""
    """Shared poll: the epoch of every answer."""

    def feed(self, channel: str, cookie: str = "session=sam") -> asyncio.Queue[bytes | None]:
        """The stream of ``channel`` opened by the connection with this Cookie header."""
        return self.feeds.setdefault(f"{channel}|{cookie}", asyncio.Queue())

    def of(self, kind: str) -> list[Call]:
        return [c for c in self.calls if c.kind == kind]

    def decide(self, kind: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any] | None:
        """The response object (data/info/meta as JSON values); None = answer garbage."""
        self.calls.append(Call(kind, body, headers))
        mode = self.mode[kind]
        if kind.startswith("map_") and body.get("key") == "refuse":
            mode = "error"
        if mode == "error":
            return {"error": {"code": 1000, "message": "custom error", "temporary": False}}
        if mode == "disconnect":
            return {"disconnect": {"code": 4501, "reason": "backend says no"}}
        if mode == "garbage":
            return None
        if mode == "raw":
            return self.raw[kind]
        return {"result": getattr(self, f"_ok_{kind}")(body, headers)}

    def _ok_connect(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        cookie = headers.get("cookie", "")
        user = cookie.removeprefix("session=") if cookie.startswith("session=") else ""
        if not user:
            raise Unauthorized
        result: dict[str, Any] = {
            "user": user,
            "info": {"name": user},
            "data": {"welcome": user},
            "meta": {"tenant": "t1"},
        }
        if self.connect_ttl:
            result["expire_at"] = int(time.time()) + self.connect_ttl
        if user.startswith("subs"):
            result["subs"] = {"feed:" + user: {"data": {"server_side": True}}}
        return result

    def _ok_refresh(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        if self.expire:
            return {"expired": True}
        return {"expire_at": int(time.time()) + self.refresh_ttl, "info": {"refreshed": True}}

    def _ok_sub_refresh(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return self._ok_refresh(body, headers)

    def _ok_subscribe(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        result: dict[str, Any] = {
            "info": {"channel_info": body["channel"]},
            "data": {"subscribed": body["channel"]},
        }
        if self.sub_ttl:
            result["expire_at"] = int(time.time()) + self.sub_ttl
        return result

    def _ok_publish(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"data": {"modified": True, "original": body.get("data")}, "skip_history": False}

    def _ok_map_publish(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        data = {"modified": True, "original": body.get("data")}
        return {"key": "b:" + body["key"], "data": data, "tags": {"via": "proxy"}}

    def _ok_map_remove(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"key": "b:" + body["key"]}

    def _ok_shared_poll_refresh(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        items = []
        for item in body.get("items", []):
            entity = self.entities.get(item["key"])
            if entity is None:
                continue
            if entity.get("removed"):
                del self.entities[item["key"]]
            items.append({"key": item["key"], **entity})
        return {"items": items, "epoch": self.epoch}

    def _ok_rpc(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        return {"data": {"method": body["method"], "echo": body.get("data")}}


class Unauthorized(Exception):
    """The connect contract's missing-cookie case: a disconnect reply."""


def _answer(
    backend: Backend, kind: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any] | None:
    try:
        return backend.decide(kind, body, headers)
    except Unauthorized:
        return {"disconnect": {"code": 4501, "reason": "unauthorized"}}


async def _huge_json(size: int) -> AsyncIterator[bytes]:
    """``{"result": {"data": "xxx…"}}`` with ``size`` x's, in 64 KiB chunks (no Content-Length)."""
    yield b'{"result":{"data":"'
    chunk = b"x" * 65536
    for _ in range(size // len(chunk)):
        yield chunk
    yield b'"}}'


def http_app(backend: Backend) -> Starlette:
    async def handle(request: Request) -> Response:
        kind = request.path_params["kind"]
        body = orjson.loads(await request.body())
        headers = {k.lower(): v for k, v in request.headers.items()}
        if backend.mode[kind] == "hang":
            backend.calls.append(Call(kind, body, headers))
            await backend.hang.wait()
        if backend.mode[kind] == "status":
            backend.calls.append(Call(kind, body, headers))
            return Response("boom", status_code=backend.status_code)
        if backend.mode[kind] == "huge":
            backend.calls.append(Call(kind, body, headers))
            return StreamingResponse(_huge_json(backend.huge_size), media_type="application/json")
        if backend.mode[kind] == "redirect":
            backend.calls.append(Call(kind, body, headers))
            return Response(status_code=307, headers={"Location": backend.redirect_to})
        answer = _answer(backend, kind, body, headers)
        if answer is None:
            return Response(b"<html>not json", media_type="text/html")
        return Response(orjson.dumps(answer), media_type="application/json")

    async def set_entity(request: Request) -> Response:
        """Shared poll: a test (or a script) changes a key's state at the backend."""
        entity = orjson.loads(await request.body())
        backend.entities[entity.pop("key")] = entity
        return Response(b"{}", media_type="application/json")

    return Starlette(
        routes=[Route("/_set", set_entity, methods=["POST"]), Route("/{kind}", handle, methods=["POST"])]
    )


# --- gRPC ----------------------------------------------------------------------------------

_RESPONSES = {
    "connect": pb.ConnectResponse,
    "refresh": pb.RefreshResponse,
    "subscribe": pb.SubscribeResponse,
    "publish": pb.PublishResponse,
    "rpc": pb.RPCResponse,
    "sub_refresh": pb.SubRefreshResponse,
    "map_publish": pb.MapPublishResponse,
    "map_remove": pb.MapRemoveResponse,
}


def _b64_json(obj: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in obj:
            obj[key] = base64.b64encode(orjson.dumps(obj[key])).decode()


def _from_grpc(request: Any) -> dict[str, Any]:
    body: dict[str, Any] = json_format.MessageToDict(request, preserving_proto_field_name=True)
    for key in ("data", "meta"):
        if key in body:
            body[key] = orjson.loads(base64.b64decode(body[key]))
    return body


class GrpcServicer(pb_grpc.CentrifugoProxyServicer):
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def _handle(self, kind: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        backend = self.backend
        body = _from_grpc(request)
        headers = {k: v for k, v in context.invocation_metadata()}
        if backend.mode[kind] == "hang":
            backend.calls.append(Call(kind, body, headers))
            await backend.hang.wait()
        if backend.mode[kind] == "status":
            backend.calls.append(Call(kind, body, headers))
            await context.abort(grpc.StatusCode.INTERNAL, "boom")
        if backend.mode[kind] == "huge":
            backend.calls.append(Call(kind, body, headers))
            response = _RESPONSES[kind]()
            if kind == "map_remove":  # no bytes field: a huge key
                response.result.key = "x" * backend.huge_size
            else:
                response.result.data = b'"' + b"x" * backend.huge_size + b'"'
            return response
        answer = _answer(backend, kind, body, headers)
        if answer is None:  # an unreadable result: base64 that is not base64
            if kind == "map_remove":  # no field protobuf would not parse: a broken message
                await context.abort(grpc.StatusCode.DATA_LOSS, "garbage")
            key = "b64data" if kind in ("publish", "rpc", "map_publish") else "b64info"
            answer = {"result": {key: "***not base64***"}}
        result = answer.get("result")
        if isinstance(result, dict):
            _b64_json(result, ("data", "info", "meta"))
            for entry in result.get("subs", {}).values():
                _b64_json(entry, ("data", "info"))
        return json_format.ParseDict(answer, _RESPONSES[kind]())

    async def Connect(self, request: Any, context: Any) -> Any:
        return await self._handle("connect", request, context)

    async def Refresh(self, request: Any, context: Any) -> Any:
        return await self._handle("refresh", request, context)

    async def Subscribe(self, request: Any, context: Any) -> Any:
        return await self._handle("subscribe", request, context)

    async def Publish(self, request: Any, context: Any) -> Any:
        return await self._handle("publish", request, context)

    async def RPC(self, request: Any, context: Any) -> Any:
        return await self._handle("rpc", request, context)

    async def SubRefresh(self, request: Any, context: Any) -> Any:
        return await self._handle("sub_refresh", request, context)

    async def MapPublish(self, request: Any, context: Any) -> Any:
        return await self._handle("map_publish", request, context)

    async def MapRemove(self, request: Any, context: Any) -> Any:
        return await self._handle("map_remove", request, context)

    async def SharedPollRefresh(self, request: Any, context: Any) -> Any:
        body = _from_grpc(request)
        headers = {k: v for k, v in context.invocation_metadata()}
        answer = _answer(self.backend, "shared_poll_refresh", body, headers) or {}
        for item in (answer.get("result") or {}).get("items", []):
            _b64_json(item, ("data",))
        return json_format.ParseDict(answer, pb.SharedPollRefreshResponse())

    def _first(self, method: str, request: Any, context: Any) -> pb.StreamSubscribeResponse | None:
        backend = self.backend
        body = _from_grpc(request)
        backend.stream_requests.append((method, body, dict(context.invocation_metadata())))
        if backend.stream_mode == "silent":
            return None
        if backend.stream_mode == "error":
            answer: dict[str, Any] = {"error": {"code": 1000, "message": "custom error"}}
        elif backend.stream_mode == "disconnect":
            answer = {"disconnect": {"code": 4501, "reason": "backend says no"}}
        else:
            result = {"info": {"stream": True}, "data": {"stream": body["channel"]}}
            _b64_json(result, ("data", "info"))
            answer = {"result": result}
        return pb.StreamSubscribeResponse(
            subscribe_response=json_format.ParseDict(answer, pb.SubscribeResponse())
        )

    async def _publications(self, channel: str, context: Any) -> AsyncIterator[pb.StreamSubscribeResponse]:
        feed = self.backend.feed(channel, dict(context.invocation_metadata()).get("cookie", ""))
        while True:
            data = await feed.get()
            if data is None:
                return
            if data == b"abort":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "backend stream broke")
            yield pb.StreamSubscribeResponse(publication=pb.Publication(data=data, tags={"via": "stream"}))

    async def SubscribeUnidirectional(self, request: Any, context: Any) -> AsyncIterator[Any]:
        channel = request.channel
        try:
            first = self._first("unidirectional", request, context)
            if first is None:
                await self.backend.hang.wait()
                return
            yield first
            async for pub in self._publications(channel, context):
                yield pub
        finally:
            self.backend.streams_closed.append(channel)

    async def SubscribeBidirectional(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        opening = await requests.__anext__()
        channel = opening.subscribe_request.channel
        backend = self.backend

        async def echo() -> None:  # what the client publishes comes back as a publication
            async for message in requests:
                data = orjson.loads(message.publication.data)
                backend.stream_published.append((channel, data))
                cookie = dict(context.invocation_metadata()).get("cookie", "")
                backend.feed(channel, cookie).put_nowait(orjson.dumps({"echo": data}))

        task = asyncio.create_task(echo())
        try:
            first = self._first("bidirectional", opening.subscribe_request, context)
            if first is None:
                await backend.hang.wait()
                return
            yield first
            async for pub in self._publications(channel, context):
                yield pub
        finally:
            task.cancel()
            backend.streams_closed.append(channel)


@dataclass
class Served:
    backend: Backend
    http_url: str
    grpc_url: str

    def endpoint(self, protocol: str, kind: str) -> str:
        return f"{self.http_url}/{kind}" if protocol == "http" else self.grpc_url


@contextlib.asynccontextmanager
async def serve_backend() -> AsyncIterator[Served]:
    """The HTTP and the gRPC backend on free ports, for the duration of the block."""
    backend = Backend()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(http_app(backend), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    grpc_server = grpc.aio.server()
    pb_grpc.add_CentrifugoProxyServicer_to_server(GrpcServicer(backend), grpc_server)
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    try:
        await wait_until(lambda: server.started, within=10, what="backend started")
        yield Served(backend, f"http://127.0.0.1:{port}", f"grpc://127.0.0.1:{grpc_port}")
    finally:
        backend.hang.set()
        await grpc_server.stop(None)
        server.should_exit = True
        await task
