"""The HTTP transport of a proxy: ``POST <endpoint>`` with a JSON body shaped like Centrifugo's
proxy.proto request (raw JSON ``data``/``meta`` embedded unchanged), one keep-alive aiohttp pool
per proxy, TLS from ``http.tls``, ``http.static_headers`` and the forwarded headers. A non-200
status, a connection failure or a body that is not JSON raise ``ProxyFailure``; the caller bounds
time. aiohttp, not httpx: a proxy call is on every connect/subscribe, and httpx cost ~10x the CPU
per request here (docs/PERFORMANCE.md, proxy section).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from gateway.config_schema import ProxySettings, ProxyTlsSettings
from gateway.proxy.replies import ProxyFailure

_RESULT_BYTES = ("data", "info", "meta")
_SUB_BYTES = ("data", "info")


def ssl_context(tls: ProxyTlsSettings) -> ssl.SSLContext:
    """A client TLS context from ``tls`` (CA file, client certificate, skip-verify)."""
    ctx = ssl.create_default_context(cafile=tls.server_ca_pem_file or None)
    if tls.cert_pem_file:
        ctx.load_cert_chain(tls.cert_pem_file, tls.key_pem_file or None)
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


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
        tls = settings.http.tls
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=max_connections, ssl=ssl_context(tls) if tls.enabled else True
            ),
            timeout=aiohttp.ClientTimeout(total=settings.timeout),
            skip_auto_headers=("User-Agent",),
        )

    async def call(self, kind: str, request: Mapping[str, Any], headers: Mapping[str, str]) -> object:
        body = orjson.dumps({k: _to_json(v) for k, v in request.items()})
        sent = {**headers, **self.static_headers, "Content-Type": "application/json"}
        try:
            async with self.http.post(self.endpoint, data=body, headers=sent) as response:
                if response.status != 200:
                    raise ProxyFailure("status", f"unexpected HTTP status code: {response.status}")
                content = await response.read()
        except TimeoutError:
            raise ProxyFailure("timeout") from None
        except aiohttp.ClientError as exc:
            raise ProxyFailure("unavailable", type(exc).__name__) from None
        try:
            return normalise(orjson.loads(content))
        except orjson.JSONDecodeError:
            raise ProxyFailure("malformed", "body is not JSON") from None

    async def close(self) -> None:
        await self.http.close()
