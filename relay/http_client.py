"""The relay's HTTP/1.1 client: keep-alive ``POST``s of JSON bodies to one gateway base URL.

What the publisher needs and nothing more: a request is one ``write`` of prebuilt header bytes and
the body, a response is a status code and the body bytes (``Content-Length``, chunked, or read to
the connection's end). Connections are kept open and reused (at most ``max_idle`` idle ones; each
concurrent request takes its own). A general client (httpx: request/response models, cookies,
redirects, auth hooks, an anyio connection pool) cost the relay about as much CPU per request as
its claim transaction; this one is a few dozen microseconds.

Contract:

* :meth:`KeepAliveClient.post` returns :class:`HttpReply` for any HTTP status; it raises
  ``TimeoutError`` when the whole exchange (connect included) exceeds ``timeout``, and ``OSError``
  (``ConnectionError``, refused, reset, DNS) or :class:`ProtocolError` (a reply that is not
  HTTP/1.x, or a body over ``MAX_REPLY_BYTES``) otherwise. A connection that failed or was
  cancelled mid-request is closed, never reused. Redirects are statuses like any other (never
  followed: the API key goes nowhere else).
* A request on a reused connection that fails before any reply byte arrives (the server closed
  the idle connection meanwhile) is sent once more on a new connection. The relay's requests are
  idempotent (every publish carries its idempotency key), so a repeat is harmless.
* ``http://`` and ``https://`` (system trust store) base URLs; headers are sent as given (the API
  key among them: never logged here).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

#: Bound on a reply's status line plus headers.
HEAD_LIMIT = 64 * 1024
#: Bound on a reply body (a batch reply is about 30 bytes per publication).
MAX_REPLY_BYTES = 16 * 1024 * 1024


class HttpReply(NamedTuple):
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class ProtocolError(OSError):
    """The server's reply is not HTTP/1.x as this client reads it."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.transport.abort()


class _Stale(Exception):
    """A reused connection failed before any reply byte: send again on a new one."""


class KeepAliveClient:
    """``POST {base_url}/{path}`` with keep-alive connections; see the module contract."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        max_idle: int = 16,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._base = url.path.rstrip("/")
        host_header = url.netloc.rpartition("@")[2]
        lines = [f"Host: {host_header}", *(f"{k}: {v}" for k, v in headers.items())]
        self._headers = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle
        self._idle: list[_Conn] = []
        self._closed = False

    async def post(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> HttpReply:
        """``POST`` ``body`` to ``{base}/{path}`` (``headers`` sent besides the client's); see the
        module contract for errors."""
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1") if headers else b""
        request = b"".join(
            (
                f"POST {self._base}/{path} HTTP/1.1\r\n".encode("latin-1"),
                extra,
                self._headers,
                str(len(body)).encode(),
                b"\r\n\r\n",
                body,
            )
        )
        async with asyncio.timeout(self._timeout):
            while self._idle:
                conn = self._idle.pop()
                try:
                    return await self._exchange(conn, request, reused=True)
                except _Stale:
                    continue
            conn = await self._connect()
            try:
                return await self._exchange(conn, request, reused=False)
            except _Stale as exc:  # not raised for a new connection; kept for the type checker
                raise ConnectionResetError("connection closed before a reply") from exc

    async def _connect(self) -> _Conn:
        async with asyncio.timeout(self._connect_timeout):
            reader, writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, limit=HEAD_LIMIT
            )
        return _Conn(reader, writer)

    async def _exchange(self, conn: _Conn, request: bytes, *, reused: bool) -> HttpReply:
        try:
            conn.writer.write(request)
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                if reused and not getattr(exc, "partial", b""):
                    raise _Stale() from exc
                raise
            status, length, chunked, close = _parse_head(head)
            if chunked:
                body = await _read_chunked(conn.reader)
            elif length is not None:
                if length > MAX_REPLY_BYTES:
                    raise ProtocolError(f"reply Content-Length {length} > {MAX_REPLY_BYTES}")
                body = await conn.reader.readexactly(length) if length else b""
            elif status in (204, 304) or 100 <= status < 200:
                body = b""
            else:
                body, close = await _read_to_close(conn.reader), True
        except asyncio.IncompleteReadError as exc:
            conn.close()
            raise ConnectionResetError("connection closed in the middle of a reply") from exc
        except asyncio.LimitOverrunError as exc:
            conn.close()
            raise ProtocolError("reply head or chunk line too long") from exc
        except BaseException:
            conn.close()
            raise
        if close or self._closed or len(self._idle) >= self._max_idle:
            conn.close()
        else:
            self._idle.append(conn)
        return HttpReply(status, body)

    async def aclose(self) -> None:
        """Close every idle connection; requests still in flight close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _parse_head(head: bytes) -> tuple[int, int | None, bool, bool]:
    """``(status, content_length, chunked, connection_close)`` of a reply head."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    close = parts[0] == b"HTTP/1.0"
    length: int | None = None
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit():
                raise ProtocolError("bad Content-Length")
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
    return status, None if chunked else length, chunked, close


async def _read_to_close(reader: asyncio.StreamReader) -> bytes:
    """A body without a length: everything up to the connection's end, bounded."""
    parts: list[bytes] = []
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
        if total > MAX_REPLY_BYTES:
            raise ProtocolError(f"reply body over {MAX_REPLY_BYTES} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise ProtocolError("bad chunk size") from exc
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, up to the blank line
                pass
            return b"".join(parts)
        total += size
        if total > MAX_REPLY_BYTES:
            raise ProtocolError(f"reply body over {MAX_REPLY_BYTES} bytes")
        chunk = await reader.readexactly(size + 2)
        parts.append(chunk[:-2])
