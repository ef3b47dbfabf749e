"""Server HTTP API (PROTOCOL.md §6): ``POST <http_api.handler_prefix>/<method>``, shaped for
PyPI ``cent`` 5.x. Errors come back as HTTP 200 with an ``error`` object (or HTTP statuses in
``transport`` error mode); a missing or wrong key is 401 with an empty body.
"""

from __future__ import annotations

import functools
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway import subscribe as subscribing
from gateway.auth import SubscriptionOverride
from gateway.channels import resolve
from gateway.client import Client
from gateway.commands import history_result
from gateway.engine.base import EngineError
from gateway.protocol import codec, codes
from gateway.protocol.messages import StreamPosition, SubscribeRecovery

if TYPE_CHECKING:
    from gateway.app import Runtime

log = logging.getLogger("taskcast.gateway.api")

Params = dict[str, Any]
Result = dict[str, Any]


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


API_INTERNAL = ApiError(100, "internal server error")
API_UNKNOWN_CHANNEL = ApiError(102, "unknown channel")
API_NOT_FOUND = ApiError(104, "not found")
API_BAD_REQUEST = ApiError(107, "bad request")
API_NOT_AVAILABLE = ApiError(108, "not available")
API_UNRECOVERABLE = ApiError(112, "unrecoverable position")

TRANSPORT_STATUS = {100: 500, 102: 404, 104: 404, 107: 400, 108: 400, 112: 416, 113: 409}


def _str(p: Params, key: str, *, required: bool = False) -> str:
    value = p.get(key)
    if value is None or value == "":
        if required:
            raise API_BAD_REQUEST
        return ""
    if not isinstance(value, str):
        raise API_BAD_REQUEST
    return value


def _int(p: Params, key: str) -> int:
    value = p.get(key, 0)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise API_BAD_REQUEST
    return value


def _bool(p: Params, key: str) -> bool:
    value = p.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise API_BAD_REQUEST
    return value


def _data(p: Params) -> bytes:
    b64 = p.get("b64data")
    if b64:
        raise API_BAD_REQUEST  # binary payloads cannot travel over the JSON client protocol
    if "data" not in p:
        raise API_BAD_REQUEST
    return orjson.dumps(p["data"])


def _tags(p: Params) -> dict[str, str] | None:
    tags = p.get("tags")
    if tags is None:
        return None
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise API_BAD_REQUEST
    return tags


OVERRIDE_FIELDS = ("presence", "join_leave", "force_push_join_leave", "force_recovery", "force_positioning")


def _override_value(override: Params, key: str) -> bool | None:
    """``override.<key>`` is ``{"value": bool}`` in Centrifugo's API; absent ⇒ None."""
    entry = override.get(key)
    value = entry.get("value") if isinstance(entry, dict) else None
    return value if isinstance(value, bool) else None


class ServerApi:
    """The API methods; each takes the params object and returns the result object."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.node = runtime.node
        self.settings = runtime.settings
        self.node.on_user_op = self.apply_user_op
        self.methods: dict[str, Callable[[Params], Awaitable[Result]]] = {
            "publish": self.publish,
            "broadcast": self.broadcast,
            "subscribe": self.subscribe,
            "unsubscribe": self.unsubscribe,
            "disconnect": self.disconnect,
            "refresh": self.refresh,
            "presence": self.presence,
            "presence_stats": self.presence_stats,
            "history": self.history,
            "history_remove": self.history_remove,
            "channels": self.channels,
            "info": self.info,
            "rpc": self.rpc,
        }

    def _options(self, channel: str) -> Any:
        if not channel:
            raise API_BAD_REQUEST
        rules = resolve(self.settings, channel)
        if isinstance(rules, codes.Error):
            raise API_UNKNOWN_CHANNEL if rules.code == 102 else API_BAD_REQUEST
        return rules.options

    async def call(self, method: str, params: Any) -> Result:
        handler = self.methods.get(method)
        if handler is None:
            raise API_NOT_FOUND
        if not isinstance(params, dict):
            raise API_BAD_REQUEST
        started = time.perf_counter()
        try:
            return await handler(params)
        except ApiError as exc:
            self.node.metrics.api_errors.labels("http", method, str(exc.code)).inc()
            raise
        except EngineError:
            log.warning("engine error in API %s", method, exc_info=True)
            self.node.metrics.api_errors.labels("http", method, "100").inc()
            raise API_INTERNAL from None
        finally:
            self.node.metrics.api_duration.labels("http", method).observe(time.perf_counter() - started)

    async def _publish_one(self, channel: str, p: Params, data: bytes) -> Result:
        opts = self._options(channel)
        result = await self.node.publish(
            channel,
            opts,
            data,
            tags=_tags(p),
            skip_history=_bool(p, "skip_history"),
            idempotency_key=_str(p, "idempotency_key"),
        )
        if result.position is None:
            return {}
        return {"offset": result.position.offset, "epoch": result.position.epoch}

    async def publish(self, p: Params) -> Result:
        return await self._publish_one(_str(p, "channel", required=True), p, _data(p))

    async def broadcast(self, p: Params) -> Result:
        channels = p.get("channels")
        if not isinstance(channels, list) or not channels or not all(isinstance(c, str) for c in channels):
            raise API_BAD_REQUEST
        data = _data(p)
        responses: list[Result] = []
        for channel in channels:
            try:
                responses.append({"result": await self._publish_one(channel, p, data)})
            except ApiError as exc:
                responses.append({"error": {"code": exc.code, "message": exc.message}})
            except EngineError:
                responses.append({"error": {"code": 100, "message": "internal server error"}})
        return {"responses": responses}

    def _targets(self, p: Params) -> list[Client]:
        clients = self.node.hub.select(
            user=_str(p, "user"), client=_str(p, "client"), session=_str(p, "session")
        )
        return [c for c in clients if isinstance(c, Client)]

    async def subscribe(self, p: Params) -> Result:
        channel = _str(p, "channel", required=True)
        self._options(channel)
        since = p.get("recover_since")
        if since is not None and not isinstance(since, dict):
            raise API_BAD_REQUEST
        await self.node.send_user_op("subscribe", p)
        return {}

    async def unsubscribe(self, p: Params) -> Result:
        self._options(_str(p, "channel", required=True))
        await self.node.send_user_op("unsubscribe", p)
        return {}

    async def disconnect(self, p: Params) -> Result:
        d = p.get("disconnect")
        if d is not None and not isinstance(d, dict):
            raise API_BAD_REQUEST
        if isinstance(d, dict):
            _int(d, "code")
            _str(d, "reason")
        if not isinstance(p.get("whitelist") or [], list):
            raise API_BAD_REQUEST
        await self.node.send_user_op("disconnect", p)
        return {}

    async def refresh(self, p: Params) -> Result:
        _bool(p, "expired")
        _int(p, "expire_at")
        await self.node.send_user_op("refresh", p)
        return {}

    def apply_user_op(self, method: str, p: Params) -> None:
        """Apply a connection-targeted action (validated by the node that received the API
        call) to this node's matching connections. Runs on every node via the control channel."""
        try:
            targets = self._targets(p)
        except ApiError:
            return
        if not targets:
            return
        if method == "subscribe":
            self._apply_subscribe(targets, p)
        elif method == "unsubscribe":
            channel = _str(p, "channel")
            for client in targets:
                client.spawn(functools.partial(client.unsubscribe, channel, codes.UNSUBSCRIBE_SERVER))
        elif method == "disconnect":
            d = p.get("disconnect")
            disconnect = codes.DISCONNECT_FORCE_NO_RECONNECT
            if isinstance(d, dict) and d.get("code"):
                disconnect = codes.Disconnect(_int(d, "code"), _str(d, "reason")[:100])
            whitelist = p.get("whitelist") or []
            for client in targets:
                if client.client_id not in whitelist:
                    client.disconnect(disconnect)
        elif method == "refresh":
            expire_at = _int(p, "expire_at")
            for client in targets:
                if _bool(p, "expired"):
                    client.disconnect(codes.DISCONNECT_EXPIRED)
                elif expire_at:
                    client.expire_at = float(expire_at)
                    client.liveness.schedule_expiry()

    def _apply_subscribe(self, targets: list[Client], p: Params) -> None:
        channel = _str(p, "channel")
        info = orjson.dumps(p["info"]) if p.get("info") is not None else None
        data = orjson.dumps(p["data"]) if p.get("data") is not None else None
        ov = p.get("override") or {}
        override = None
        if isinstance(ov, dict) and ov:
            override = SubscriptionOverride(**{k: _override_value(ov, k) for k in OVERRIDE_FIELDS})
        since = p.get("recover_since")
        wanted = None
        if isinstance(since, dict):
            wanted = SubscribeRecovery(True, _int(since, "offset"), _str(since, "epoch"))
        server_sub = subscribing.ServerSub(info, data, override)
        for client in targets:
            if channel not in client.session.subscriptions:
                client.spawn(functools.partial(_server_subscribe, client, channel, server_sub, wanted))

    async def presence(self, p: Params) -> Result:
        channel = _str(p, "channel", required=True)
        if not self._options(channel).presence:
            raise API_NOT_AVAILABLE
        entries = await self.node.presence.presence(channel)
        return {"presence": {cid: codec.client_info_obj(info) for cid, info in entries.items()}}

    async def presence_stats(self, p: Params) -> Result:
        channel = _str(p, "channel", required=True)
        if not self._options(channel).presence:
            raise API_NOT_AVAILABLE
        st = await self.node.presence.stats(channel)
        return {"num_clients": st.num_clients, "num_users": st.num_users}

    async def history(self, p: Params) -> Result:
        channel = _str(p, "channel", required=True)
        opts = self._options(channel)
        if not (opts.history_size > 0 and opts.history_ttl > 0):
            raise API_NOT_AVAILABLE
        since_raw = p.get("since")
        since = None
        if since_raw is not None:
            if not isinstance(since_raw, dict):
                raise API_BAD_REQUEST
            since = StreamPosition(_int(since_raw, "offset"), _str(since_raw, "epoch"))
        reverse = _bool(p, "reverse")
        if reverse and since is not None and since.offset == 0:
            raise API_BAD_REQUEST
        result = await self.node.history(channel, opts, since=since, limit=_int(p, "limit"), reverse=reverse)
        if since is not None and since.epoch and since.epoch != result.position.epoch:
            raise API_UNRECOVERABLE
        return history_result(result.publications, result.position)

    async def history_remove(self, p: Params) -> Result:
        channel = _str(p, "channel", required=True)
        opts = self._options(channel)
        if not (opts.history_size > 0 and opts.history_ttl > 0):
            raise API_NOT_AVAILABLE
        await self.node.broker.remove_history(channel)
        return {}

    async def channels(self, p: Params) -> Result:
        """Active channels across the cluster (a survey of every live node)."""
        pattern = _str(p, "pattern")
        counts: dict[str, int] = {}
        for payload in (await self.node.survey("channels")).values():
            if isinstance(payload, dict):
                for channel, n in payload.items():
                    if isinstance(n, int) and (not pattern or fnmatchcase(channel, pattern)):
                        counts[channel] = counts.get(channel, 0) + n
        return {"channels": {ch: {"num_clients": n} for ch, n in counts.items()}}

    async def info(self, p: Params) -> Result:
        return {"nodes": self.node.nodes()}  # every live node, from the cluster heartbeats

    async def rpc(self, p: Params) -> Result:
        raise API_NOT_FOUND


async def _server_subscribe(
    client: Client, channel: str, server_sub: subscribing.ServerSub, wanted: SubscribeRecovery | None
) -> None:
    """Server API ``subscribe`` for one live connection: establish, push ``subscribe``, go live."""
    if client.closed or channel in client.session.subscriptions:
        return
    try:
        result = await subscribing.subscribe_server_side(client, channel, server_sub, wanted)
    except Exception as exc:
        log.info("server-side subscribe of %s to %s refused: %s", client.client_id, channel, exc)
        return
    client.send(codec.encode_push(channel, "subscribe", result))
    sub = client.session.subscriptions.get(channel)
    if sub is not None:
        subscribing.go_live(client, sub)


# --- HTTP endpoint ---------------------------------------------------------------------------------


def _authorized(request: Request, key: str) -> bool:
    supplied = request.headers.get("x-api-key") or None
    if supplied is None:
        auth = request.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "apikey":
            supplied = value.strip()
    if supplied is None:
        supplied = request.query_params.get("api_key")
    return supplied is not None and bool(key) and hmac.compare_digest(supplied.encode(), key.encode())


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


class ApiEndpoint:
    """Starlette endpoint for ``/api/<method>``, ``/api/batch`` and the legacy ``/api``."""

    def __init__(self, runtime: Runtime, api: ServerApi) -> None:
        self.runtime = runtime
        self.api = api
        self.max_body = 10 * 1024 * 1024

    async def __call__(self, request: Request) -> Response:
        settings = self.runtime.settings.http_api
        if request.method != "POST":
            return Response(status_code=405)
        if not settings.insecure and not _authorized(request, settings.key):
            return Response(status_code=401)
        try:
            body = await request.body()
        except ClientDisconnect:  # gone mid-body (or cut by http_server.request_timeout)
            return Response(status_code=400)
        if len(body) > self.max_body:
            return Response("request entity too large", status_code=413)
        method = request.path_params.get("method", "")
        transport_mode = (
            settings.error_mode == "transport"
            or request.headers.get("x-centrifugo-error-mode") == "transport"
        )
        if not method:
            return await self._legacy(body)
        try:
            params = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError:
            return Response("bad request", status_code=400, media_type="text/plain")
        if method == "batch":
            return await self._batch(params)
        try:
            result = await self.api.call(method, params)
        except ApiError as exc:
            if transport_mode:
                return _json({"code": exc.code, "message": exc.message}, TRANSPORT_STATUS.get(exc.code, 400))
            return _json({"error": {"code": exc.code, "message": exc.message}})
        return _json({"result": result})

    async def _batch(self, params: Any) -> Response:
        if not isinstance(params, dict) or not isinstance(params.get("commands"), list):
            return _json({"error": {"code": 107, "message": "bad request"}})
        replies: list[Result] = []
        for command in params["commands"]:
            if not isinstance(command, dict) or len(command) != 1:
                replies.append({"error": {"code": 107, "message": "bad request"}})
                continue
            ((method, method_params),) = command.items()
            if method == "batch":
                replies.append({"error": {"code": 104, "message": "not found"}})
                continue
            try:
                replies.append({method: await self.api.call(method, method_params)})
            except ApiError as exc:
                replies.append({"error": {"code": exc.code, "message": exc.message}})
        return _json({"replies": replies})

    async def _legacy(self, body: bytes) -> Response:
        """``POST /api`` with newline-delimited ``{"method","params"}`` commands (v5 legacy)."""
        lines: list[bytes] = []
        for raw_line in body.split(b"\n"):
            if not raw_line.strip():
                continue
            try:
                cmd = orjson.loads(raw_line)
            except orjson.JSONDecodeError:
                return Response("bad request", status_code=400, media_type="text/plain")
            if not isinstance(cmd, dict):
                return Response("bad request", status_code=400, media_type="text/plain")
            try:
                result = await self.api.call(str(cmd.get("method", "")), cmd.get("params") or {})
                lines.append(orjson.dumps({"result": result}))
            except ApiError as exc:
                lines.append(orjson.dumps({"error": {"code": exc.code, "message": exc.message}}))
        return Response(b"\n".join(lines), media_type="application/json")
