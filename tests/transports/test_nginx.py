"""The streaming transports behind a real nginx (Debian package, installed by
scripts/services.sh) configured exactly as docs/transports.md recommends — the config block is
read from that page: the first event arrives within 1 s, an idle stream outlives nginx's 60 s
``proxy_read_timeout`` thanks to the gateway's pings (while a stream without pings is cut), and
centrifuge-js reconnects and recovers through the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.config.schema import ClientSettings
from tests.support import GatewayProcess, free_port, mint_token, scaled
from tests.transports.conftest import (
    SECRET,
    StreamReader,
    cf_connect,
    of,
    open_stream,
    run_js,
    stream_config,
    uid,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "transports.md"
READ_TIMEOUT_SECONDS = 60
COMPRESSED_TIMEOUT = 12  # the idle test's proxy_read_timeout, seconds (scaled)


def documented_nginx_block() -> str:
    """The one ```nginx block of docs/transports.md."""
    blocks = re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/transports.md must hold exactly one nginx block"
    return blocks[0]


class Nginx:
    """A throwaway nginx in the foreground (no daemon) with everything under ``workdir``."""

    def __init__(self, workdir: Path, upstream_port: int, read_timeout_seconds: int | None = None) -> None:
        """``read_timeout_seconds`` replaces the documented ``proxy_read_timeout`` (a test that
        watches the timeout fire compresses time: the pings keep the documented ratio to it)."""
        block = documented_nginx_block()
        assert "server 127.0.0.1:8000;" in block and "listen 80;" in block
        assert f"proxy_read_timeout {READ_TIMEOUT_SECONDS}s;" in block
        if read_timeout_seconds is not None:
            block = block.replace(
                f"proxy_read_timeout {READ_TIMEOUT_SECONDS}s;", f"proxy_read_timeout {read_timeout_seconds}s;"
            )
        self.port = free_port()
        block = block.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
        block = block.replace("listen 80;", f"listen 127.0.0.1:{self.port};")
        self.dir = workdir
        temp = workdir / "temp"
        temp.mkdir(parents=True, exist_ok=True)
        self.error_log = workdir / "error.log"
        config = f"""
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {self.error_log} info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
{block}
}}
"""
        self.conf = workdir / "nginx.conf"
        self.conf.write_text(config)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            pytest.fail("nginx is not installed: scripts/services.sh installs it (apt package nginx)")
        check = subprocess.run(
            [binary, "-t", "-p", str(self.dir), "-c", str(self.conf)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stderr
        log = (self.dir / "stderr.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, "-p", str(self.dir), "-c", str(self.conf), "-g", "daemon off;"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + scaled(10)
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.dir / "stderr.log").read_text()
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)  # polling interval of the readiness loop
        raise TimeoutError("nginx did not proxy /health within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


ProxiedPair = tuple[GatewayProcess, Nginx]


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedPair]:
    """A gateway with the default 25 s pings behind nginx."""
    workdir = tmp_path_factory.mktemp("nginx")
    gw = GatewayProcess(stream_config(client={"ping_interval": "25s"}), workdir / "gw").start()
    nginx = Nginx(workdir / "nginx", gw.port)
    try:
        yield gw, nginx.start()
    finally:
        nginx.stop()
        gw.terminate()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None)) as client:
        yield client


def connect_command(token: str) -> dict[str, Any]:
    return {"id": 1, "connect": {"token": token}}


async def api(http: httpx.AsyncClient, gw: GatewayProcess, method: str, params: dict[str, Any]) -> Any:
    resp = await http.post(f"{gw.api_url}/{method}", json=params, headers={"X-API-Key": gw.api_key})
    assert "error" not in resp.json(), resp.text
    return resp.json()["result"]


@pytest.mark.parametrize("transport", ["sse", "http_stream", "uni_sse"])
async def test_first_event_is_not_held_in_nginx_buffers(http, proxied, transport):
    """The connect reply comes through while the stream is open. Buffered by nginx, a few hundred
    bytes of an open stream would wait for its proxy buffer to fill (pings of two bytes every 25 s):
    a count of what arrived, not a latency, so a loaded machine cannot fail it."""
    _, nginx = proxied
    token = mint_token(SECRET, "42", channels=[f"feed:{uid()}"])
    if transport == "sse":
        url = f"{nginx.url}/connection/sse?cf_connect={cf_connect(connect_command(token))}"
        opened = open_stream(http, "GET", url, sse=True)
    elif transport == "uni_sse":
        opened = open_stream(
            http, "GET", f"{nginx.url}/connection/uni_sse?cf_connect={cf_connect({'token': token})}", sse=True
        )
    else:
        body = orjson.dumps(connect_command(token))
        opened = open_stream(http, "POST", f"{nginx.url}/connection/http_stream", sse=False, content=body)
    async with opened as stream:
        first = await stream.next()
        assert "connect" in first
        assert not stream.ended.is_set()
        # nginx consumes X-Accel-Buffering itself (it is what turns buffering off); the
        # no-cache headers pass through to the browser.
        assert "x-accel-buffering" not in stream.response.headers
        assert "no-cache" in stream.response.headers["cache-control"]
        if transport.endswith("sse"):
            assert bytes(stream.raw).startswith(b"\r\n")


async def _keep_answering_pings(
    http: httpx.AsyncClient, nginx: Nginx, stream: StreamReader, connect: dict[str, Any], pings: list[float]
) -> None:
    """A bidirectional client's part: answer every ping with a pong POSTed through nginx."""
    while True:
        message = await stream.messages.get()
        if message is None:
            return
        if message == {}:
            pings.append(time.monotonic())
            body = {"session": connect["session"], "node": connect["node"], "data": "{}"}
            assert (await http.post(f"{nginx.url}/emulation", json=body)).status_code == 204


def test_the_documented_read_timeout_is_at_least_twice_the_default_ping_interval() -> None:
    """The rule docs/transports.md states, on its own numbers: nginx's ``proxy_read_timeout`` (60 s)
    against the gateway's default ``client.ping_interval`` (25 s, from the config's defaults)."""
    ping = ClientSettings().ping_interval
    assert 2 * ping <= READ_TIMEOUT_SECONDS, (READ_TIMEOUT_SECONDS, ping)


GATEWAY_KEEP_ALIVE_SECONDS = 5  # uvicorn's timeout_keep_alive, which the gateway keeps


@pytest.mark.parametrize("where", ["docs/transports.md", "deploy/nginx/taskcast.conf.template"])
def test_nginx_drops_an_idle_upstream_connection_before_the_gateway_does(where: str) -> None:
    """A pooled upstream connection the gateway is closing, reused for a POST (/emulation, the
    server API), is a 502 that nginx does not retry: every upstream block keeps idle connections
    for less than the gateway's keep-alive (seen as a 502 on a pong in a loaded run)."""
    text = documented_nginx_block() if where.startswith("docs") else (ROOT / where).read_text()
    blocks = re.findall(r"^upstream \S+ \{\n(.*?)^\}", text, flags=re.S | re.M)
    assert blocks
    for block in blocks:
        if "keepalive " not in block:
            continue
        found = re.search(r"keepalive_timeout (\d+)s;", block)
        assert found and int(found.group(1)) < GATEWAY_KEEP_ALIVE_SECONDS, block


async def test_idle_streams_outlive_the_nginx_read_timeout_thanks_to_pings(http, tmp_path):
    """Through the documented nginx, time compressed: its ``proxy_read_timeout`` set to
    ``COMPRESSED_TIMEOUT`` and the gateway's pings at the documented ratio (25 s : 60 s). A
    bidirectional http_stream (answering pings through /emulation) and a uni_sse stream stay open
    past the timeout; a stream from a gateway whose pings are slower than it is cut by nginx once
    the timeout has passed (proof that the timeout is real and the pings are what help)."""
    timeout = max(1, round(scaled(COMPRESSED_TIMEOUT)))
    ping = timeout * 25 / READ_TIMEOUT_SECONDS
    client = {"ping_interval": f"{ping:.3f}s", "pong_timeout": f"{ping * 0.8:.3f}s"}
    gw = GatewayProcess(stream_config(client=client), tmp_path / "gw").start()
    nginx = Nginx(tmp_path / "nginx", gw.port, read_timeout_seconds=timeout)
    silent_gw = GatewayProcess(stream_config(client={"ping_interval": "300s"}), tmp_path / "silent").start()
    silent_nginx = Nginx(tmp_path / "silent-nginx", silent_gw.port, read_timeout_seconds=timeout)
    try:
        nginx.start()
        silent_nginx.start()
        feed = f"feed:{uid()}"
        token = mint_token(SECRET, "42", channels=[feed])
        bidi = open_stream(
            http,
            "POST",
            f"{nginx.url}/connection/http_stream",
            sse=False,
            content=orjson.dumps(connect_command(token)),
        )
        uni_url = f"{nginx.url}/connection/uni_sse?cf_connect={cf_connect({'token': token})}"
        silent_url = f"{silent_nginx.url}/connection/uni_sse?cf_connect={cf_connect({'token': token})}"
        async with (
            bidi as bidi_stream,
            open_stream(http, "GET", uni_url, sse=True) as uni_stream,
            open_stream(http, "GET", silent_url, sse=True) as silent_stream,
        ):
            connect = (await bidi_stream.next())["connect"]
            assert "connect" in await uni_stream.next()
            assert "connect" in await silent_stream.next()
            opened_at = time.monotonic()
            pings: list[float] = []
            answering = asyncio.ensure_future(_keep_answering_pings(http, nginx, bidi_stream, connect, pings))
            uni_messages: list[dict[str, Any]] = []
            silent_closed_at: float | None = None
            # Watch the streams until the silent one is cut and the others have outlived the
            # timeout by a ping interval; a bound ends a hung watch.
            give_up = opened_at + timeout + scaled(30)
            while silent_closed_at is None or time.monotonic() - opened_at < timeout + ping:
                assert time.monotonic() < give_up, "nginx never cut the stream without pings"
                if silent_closed_at is None and silent_stream.ended.is_set():
                    silent_closed_at = time.monotonic()
                try:
                    uni_messages.append(await uni_stream.next(wait=ping / 4))
                except TimeoutError:
                    pass
                assert not bidi_stream.ended.is_set(), "nginx closed the pinged bidirectional stream"
                assert not uni_stream.ended.is_set(), "nginx closed the pinged uni_sse stream"
                assert not answering.done() or answering.exception() is None
            assert len(pings) >= 2 and uni_messages.count({}) >= 2
            assert silent_closed_at - opened_at >= timeout - 1  # nginx's timeout, not an early close
            assert await silent_stream.wait_end() == []  # cut: no disconnect push from the gateway

            # Still live after the timeout: a publication reaches both pinged streams.
            answering.cancel()  # it would take the publication off the bidirectional stream
            with contextlib.suppress(asyncio.CancelledError):
                await answering
            await api(http, gw, "publish", {"channel": feed, "data": {"after": "idle"}})
            pub, _ = await uni_stream.until(lambda m: "pub" in m)
            assert pub == {"channel": feed, "pub": {"data": {"after": "idle"}, "offset": 1}}
            pub, _ = await bidi_stream.until(lambda m: "push" in m)
            assert pub["push"]["pub"]["data"] == {"after": "idle"}
    finally:
        for n in (nginx, silent_nginx):
            n.stop()
        for g in (gw, silent_gw):
            g.terminate()


@pytest.mark.node
@pytest.mark.parametrize("transport", ["sse", "http_stream"])
def test_js_reconnect_recovers_through_nginx(node_bin, proxied, transport):
    gw, nginx = proxied
    user, channel = f"u-{uid()}", f"rec-{uid()}"
    events = run_js(
        node_bin,
        "recovery.mjs",
        gw,
        transport=transport,
        url=[{"transport": transport, "endpoint": f"{nginx.url}/connection/{transport}"}],
        emulation_endpoint=f"{nginx.url}/emulation",
        token=mint_token(SECRET, user),
        user=user,
        channel=channel,
        before=2,
        away=3,
        serverSide=False,
    )
    assert [e["code"] for e in of(events, "connecting")][-1] == 3011
    first, second = of(events, "subscribed")
    assert first["wasRecovering"] is False
    assert second["wasRecovering"] is True and second["recovered"] is True
    assert [p["offset"] for p in of(events, "publication")] == [1, 2, 3, 4, 5]
