"""The relay's HTTP client: keep-alive ``POST``s of JSON bodies to one gateway base URL, on
aiohttp (the gateway's proxy client uses it too: a C parser and a connection pool, at a fraction
of httpx's CPU per request).

Contract:

* :meth:`KeepAliveClient.post` returns :class:`HttpReply` for any HTTP status (a redirect is a
  status like any other: never followed, so the API key never goes where a ``Location`` points);
  it raises ``TimeoutError`` when the whole exchange (connect included) exceeds ``timeout``, and
  ``OSError`` (``ConnectionError``: refused, reset, DNS) or :class:`ProtocolError` (a reply that
  is not HTTP/1.x, or a body over ``max_reply_bytes``) otherwise.
* A request on a reused keep-alive connection that the server had closed meanwhile (aiohttp's
  ``ServerDisconnectedError`` or a failed write before any reply) is sent once more on a new
  connection; a connection that cannot be opened is not retried here. The relay's
  requests are idempotent (every publish carries its idempotency key), so a repeat is harmless.
* ``http://`` and ``https://`` (system trust store) base URLs; headers are sent as given (the API
  key among them: never logged here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

import aiohttp

MAX_REPLY_BYTES = 16 * 1024 * 1024
"""Bound on a reply body: a batch reply is about 30 bytes per publication."""
_READ_CHUNK = 64 * 1024


class HttpReply(NamedTuple):
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class ProtocolError(OSError):
    """The server's reply is not HTTP/1.x as aiohttp reads it, or its body is over the bound."""


class KeepAliveClient:
    """``POST {base_url}/{path}`` over a keep-alive pool; see the module contract. Build it
    inside the running event loop (aiohttp binds the session to it)."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        max_connections: int = 32,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._base = base_url.rstrip("/")
        self._headers = dict(headers)
        self._max_reply = max_reply_bytes
        self._session: aiohttp.ClientSession | None = None
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._max_connections = max_connections

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max(1, self._max_connections)),
                timeout=self._timeout,
                headers=self._headers,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def post(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> HttpReply:
        """``POST`` ``body`` to ``{base}/{path}`` (``headers`` added to the client's); see the
        module contract for errors."""
        url = f"{self._base}/{path}"
        for attempt in (1, 2):
            try:
                async with self._pool().post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    return HttpReply(response.status, await self._read(response))
            except aiohttp.ClientConnectorError as exc:  # could not connect: no second try
                raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A pooled connection the server had closed: sent again once on a new one.
                if attempt == 2:
                    raise ConnectionResetError(f"connection closed before a reply: {exc}") from exc
            except aiohttp.ClientResponseError as exc:  # a malformed status line or head
                raise ProtocolError(f"not an HTTP/1.x reply: {exc.message}") from exc
            except aiohttp.ClientPayloadError as exc:
                raise ConnectionResetError(f"reply body cut short: {exc}") from exc
            except aiohttp.ClientConnectionError as exc:
                raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        limit = self._max_reply
        if response.content_length is not None and response.content_length > limit:
            raise ProtocolError(f"reply Content-Length {response.content_length} > {limit}")
        content = bytearray()
        async for chunk in response.content.iter_chunked(_READ_CHUNK):
            content += chunk
            if len(content) > limit:
                raise ProtocolError(f"reply body over {limit} bytes")
        return bytes(content)

    async def aclose(self) -> None:
        """Close the pool; requests still in flight end with a connection error."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
