"""Fixtures for the streaming-transport tests: real gateway processes (httpx's ASGITransport
buffers whole responses, so endless SSE/HTTP-streaming bodies need a real server) and a reader
that parses SSE events or JSON lines from an open response."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest

from tests.conformance.conftest import JS_DIR
from tests.support import GatewayProcess, scaled
from tests.support.waiting import DEFAULT_WITHIN

SECRET = "transports-secret-0123456789abcdefghij"
ALLOWED_ORIGIN = "http://allowed.example"
HISTORY = {"history_size": 10, "history_ttl": "300s", "force_recovery": True}

STREAM_CONFIG: dict[str, Any] = {
    "client": {"token": {"hmac_secret_key": SECRET}, "allowed_origins": [ALLOWED_ORIGIN]},
    "sse": {"enabled": True},
    "http_stream": {"enabled": True},
    "uni_sse": {"enabled": True},
    "uni_http_stream": {"enabled": True},
    "channel": {
        "without_namespace": {
            **HISTORY,
            "allow_subscribe_for_client": True,
            "allow_publish_for_subscriber": True,
            "allow_history_for_subscriber": True,
        },
        # Server-side channels come from the token's `channels` claim.
        "namespaces": [{"name": "feed", **HISTORY}],
    },
}


def stream_config(**overrides: Any) -> dict[str, Any]:
    """STREAM_CONFIG with top-level sections merged (one level deep)."""
    config = copy.deepcopy(STREAM_CONFIG)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def uid() -> str:
    return uuid.uuid4().hex[:10]


def cf_connect(message: dict[str, Any]) -> str:
    return quote(orjson.dumps(message).decode(), safe="")


GatewayFactory = Callable[..., GatewayProcess]


@pytest.fixture
def gateway_factory(tmp_path: Path) -> Iterator[GatewayFactory]:
    """``gateway_factory(config)`` starts a gateway process; all are stopped at teardown."""
    started: list[GatewayProcess] = []

    def start(config: dict[str, Any] | None = None) -> GatewayProcess:
        gw = GatewayProcess(config if config is not None else stream_config(), tmp_path / "gw").start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.terminate()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway per module with every streaming transport on (tests use unique channels)."""
    gw = GatewayProcess(stream_config(), tmp_path_factory.mktemp("stream-gw")).start()
    yield gw
    gw.terminate()
    assert gw.api_key not in gw.log_text()


class StreamReader:
    """Reads an open streaming response in a background task and parses its messages: SSE
    ``data:`` events (``sse=True``) or newline-delimited JSON. ``raw`` keeps every byte read."""

    def __init__(self, response: httpx.Response, *, sse: bool) -> None:
        self.response = response
        self.sse = sse
        self.raw = bytearray()
        self.messages: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.ended = asyncio.Event()
        self._buffer = b""
        self._task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            async for chunk in self.response.aiter_raw():
                self.raw += chunk
                self._buffer += chunk
                self._parse()
        except (httpx.HTTPError, OSError):
            pass
        finally:
            self.ended.set()
            self.messages.put_nowait(None)

    def _parse(self) -> None:
        sep = b"\n\n" if self.sse else b"\n"
        while sep in self._buffer:
            event, self._buffer = self._buffer.split(sep, 1)
            if self.sse:
                lines = [ln for ln in event.replace(b"\r\n", b"\n").split(b"\n") if ln.startswith(b"data:")]
                if not lines:
                    continue  # the initial "\r\n" flush, or a comment
                assert len(lines) == 1, f"one reply per SSE event expected: {event!r}"
                payload = lines[0][len(b"data:") :].strip()
            else:
                payload = event.strip()
                if not payload:
                    continue
            self.messages.put_nowait(orjson.loads(payload))

    async def next(self, wait: float = DEFAULT_WITHIN) -> dict[str, Any]:
        """The next message; fails if the stream ends or nothing arrives within ``wait`` (scaled)."""
        async with asyncio.timeout(scaled(wait)):
            message = await self.messages.get()
        assert message is not None, f"stream ended; raw bytes: {bytes(self.raw)!r}"
        return message

    async def until(
        self, pred: Callable[[dict[str, Any]], bool], wait: float = DEFAULT_WITHIN
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until a message matches; returns it and the messages skipped on the way."""
        skipped: list[dict[str, Any]] = []
        async with asyncio.timeout(scaled(wait)):
            while True:
                message = await self.next(wait)
                if pred(message):
                    return message, skipped
                skipped.append(message)

    async def wait_end(self, wait: float = DEFAULT_WITHIN) -> list[dict[str, Any]]:
        """Wait for the server to end the response; returns the messages read until then."""
        async with asyncio.timeout(scaled(wait)):
            await self.ended.wait()
        rest: list[dict[str, Any]] = []
        while not self.messages.empty():
            message = self.messages.get_nowait()
            if message is not None:
                rest.append(message)
        return rest

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self.response.aclose()


@contextlib.asynccontextmanager
async def open_stream(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    sse: bool,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[StreamReader]:
    """Open a streaming request; yields a StreamReader once the response headers are in."""
    request = http.build_request(method, url, content=content, headers=headers)
    response = await http.send(request, stream=True)
    reader = StreamReader(response, sse=sse)
    try:
        yield reader
    finally:
        await reader.aclose()


@pytest.fixture(scope="session")
def node_bin() -> str:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "centrifuge").is_dir():
        pytest.fail("node or tests/conformance/js/node_modules missing: run `bash scripts/bootstrap.sh`")
    return node


SCRIPT_TIMEOUT_SECONDS = 30


def emulation_endpoints(gw: GatewayProcess, transport: str) -> list[dict[str, str]]:
    return [{"transport": transport, "endpoint": f"{gw.url}/connection/{transport}"}]


def run_js(
    node: str,
    script: str,
    gw: GatewayProcess,
    *,
    transport: str,
    emulation_gw: GatewayProcess | None = None,
    url: list[dict[str, str]] | None = None,
    emulation_endpoint: str | None = None,
    **args: Any,
) -> list[dict[str, Any]]:
    """Run a centrifuge-js script of tests/conformance/js over an emulation transport of ``gw``
    (``url`` overrides the endpoints, e.g. through a proxy); its /emulation POSTs go to
    ``emulation_endpoint``, else to ``emulation_gw`` (default: the same node). Returns the
    script's events; fails unless it printed "done"."""
    target = emulation_gw or gw
    payload = {
        "url": url or emulation_endpoints(gw, transport),
        "emulationEndpoint": emulation_endpoint or f"{target.url}/emulation",
        "apiUrl": gw.api_url,
        "apiKey": gw.api_key,
        **args,
    }
    proc = subprocess.run(
        [node, script, json.dumps(payload)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_SECONDS,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    logs = "".join(f"\n{g.url} log:\n{g.log_text()[-3000:]}" for g in {gw, target})
    detail = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}{logs}"
    assert proc.returncode == 0, detail
    assert events and events[-1]["event"] == "done", detail
    return events


def of(events: list[dict[str, Any]], name: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]
