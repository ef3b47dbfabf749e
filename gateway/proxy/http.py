"""The HTTP transport of a proxy: ``POST <endpoint>`` with a JSON body shaped like Centrifugo's
proxy.proto request (raw JSON ``data``/``meta`` embedded unchanged), one keep-alive aiohttp pool
per proxy, TLS from ``http.tls``, ``http.static_headers`` under the forwarded headers. A non-200
status matched by ``http.status_to_code_transforms`` becomes that ``error``/``disconnect`` answer; any other
status (a 3xx included: redirects are never followed, so the body and the static headers never
go to another host), a connection failure, a body that is not JSON or one past
``max_response_size`` raise ``ProxyFailure``; the caller bounds time. aiohttp, not httpx: a
proxy call is on every connect/subscribe, and httpx cost ~10x the CPU per request here
(docs/PERFORMANCE.md, proxy section).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from gateway.config.sections.proxy import ProxySettings, ProxyStatusTransform
from gateway.config.sections.tls import TlsSettings
from gateway.config.tls import load_pem, pem_path
from gateway.proxy.replies import ProxyFailure

_RESULT_BYTES = ("data", "info", "meta")
_READ_CHUNK = 64 * 1024
DEFAULT_MAX_RESPONSE_SIZE = 4 * 1024 * 1024
"""``max_response_size`` 0: 4 MiB, grpc-go's default receive limit (a Centrifugo gRPC proxy's)."""


def max_response_size(settings: ProxySettings) -> int:
    """The largest answer read from this proxy (HTTP body or gRPC message), in bytes."""
    return settings.max_response_size or DEFAULT_MAX_RESPONSE_SIZE


_SUB_BYTES = ("data", "info")


def ssl_context(tls: TlsSettings, section: str) -> ssl.SSLContext:
    """A client TLS context from Centrifugo's ``tls`` options: ``server_ca_pem`` verifies the
    backend (else the system store), ``cert_pem``/``key_pem`` are the client certificate (mTLS),
    ``server_name`` is the name checked, ``insecure_skip_verify`` turns verification off. Each
    ``*_pem`` is PEM text, its base64 or a file path (``gateway.config.tls``).

    Raises:
        ConfigError: a PEM that does not load.
    """
    ctx = ssl.create_default_context()
    if tls.server_ca_pem:
        ctx.load_verify_locations(cadata=load_pem(tls.server_ca_pem, f"{section}.server_ca_pem").decode())
    if tls.cert_pem:
        ctx.load_cert_chain(
            pem_path(tls.cert_pem, f"{section}.cert_pem"), pem_path(tls.key_pem, f"{section}.key_pem")
        )
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def status_answer(status: int, transforms: tuple[ProxyStatusTransform, ...]) -> dict[str, Any] | None:
    """The ``error`` / ``disconnect`` answer ``http.status_to_code_transforms`` gives a non-200
    status (Centrifugo's transformHTTPStatusError), or None when no entry matches."""
    for t in transforms:
        if t.status_code != status:
            continue
        if t.to_disconnect.code:
            return {"disconnect": {"code": t.to_disconnect.code, "reason": t.to_disconnect.reason}}
        if t.to_error.code:
            e = t.to_error
            return {"error": {"code": e.code, "message": e.message, "temporary": e.temporary}}
    return None


def _to_json(value: object) -> object:
    """Request values: bytes fields are already-encoded JSON."""
    if isinstance(value, bytes):
        return orjson.Fragment(value)
    return value


def _raw_json(obj: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in obj and obj[key] is not None:
            obj[key] = orjson.dumps(obj[key])


def normalise(answer: object) -> object:
    """A decoded JSON answer with its raw-JSON fields turned back into bytes."""
    if not isinstance(answer, dict):
        return answer
    result = answer.get("result")
    if isinstance(result, dict):
        _raw_json(result, _RESULT_BYTES)
        subs = result.get("subs")
        if isinstance(subs, dict):
            for entry in subs.values():
                if isinstance(entry, dict):
                    _raw_json(entry, _SUB_BYTES)
    return answer


class HttpProxyTransport:
    """Calls one HTTP proxy endpoint. ``close`` releases the pool."""

    protocol = "http"

    def __init__(self, settings: ProxySettings, *, max_connections: int) -> None:
        """Build inside the running event loop (aiohttp binds the session to it)."""
        self.endpoint = settings.endpoint
        self.static_headers = dict(settings.http.static_headers)
        self.transforms = settings.http.status_to_code_transforms
        tls = settings.http.tls
        self.server_hostname = tls.server_name or None
        self.max_response_size = max_response_size(settings)
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=max_connections, ssl=ssl_context(tls, "http.tls") if tls.enabled else True
            ),
            timeout=aiohttp.ClientTimeout(total=settings.timeout),
            skip_auto_headers=("User-Agent",),
        )

    async def call(self, kind: str, request: Mapping[str, Any], headers: Mapping[str, str]) -> object:
        body = orjson.dumps({k: _to_json(v) for k, v in request.items()})
        # The client's forwarded headers win over static_headers (Centrifugo's priority).
        sent = {k.lower(): v for k, v in self.static_headers.items()}
        sent.update((k.lower(), v) for k, v in headers.items())
        sent["content-type"] = "application/json"
        try:
            # Never follow a redirect: it would re-send the body and the static (secret) headers
            # to wherever the Location points. A 3xx is a status like any other non-200.
            async with self.http.post(
                self.endpoint,
                data=body,
                headers=sent,
                server_hostname=self.server_hostname,
                allow_redirects=False,
            ) as response:
                if response.status != 200:
                    answer = status_answer(response.status, self.transforms)
                    if answer is not None:
                        return answer
                    raise ProxyFailure("status", f"unexpected HTTP status code: {response.status}")
                content = await self._read(response)
        except TimeoutError:
            raise ProxyFailure("timeout") from None
        except aiohttp.ClientError as exc:
            raise ProxyFailure("unavailable", type(exc).__name__) from None
        try:
            return normalise(orjson.loads(content))
        except orjson.JSONDecodeError:
            raise ProxyFailure("malformed", "body is not JSON") from None

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The body, refused (``too_large``) as soon as it passes ``max_response_size``: a
        declared length is checked before reading, a streamed body chunk by chunk."""
        limit = self.max_response_size
        if response.content_length is not None and response.content_length > limit:
            raise ProxyFailure("too_large", f"Content-Length {response.content_length} > {limit}")
        content = bytearray()
        async for chunk in response.content.iter_chunked(_READ_CHUNK):
            content += chunk
            if len(content) > limit:
                raise ProxyFailure("too_large", f"body over {limit} bytes")
        return bytes(content)

    async def close(self) -> None:
        await self.http.close()
