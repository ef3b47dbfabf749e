"""``taskcast configdoc`` and ``taskcast serve`` (taskcast/dev_cli.py): Centrifugo's flags, the
reference lists every option (supported and unsupported), both servers answer over real sockets."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from gateway.config import doc as config_doc
from gateway.config.unsupported import UNSUPPORTED
from taskcast import centrifugo_cli, dev_cli


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read()


def test_configdoc_markdown_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert centrifugo_cli.main("configdoc", ["-m"]) == 0
    out = capsys.readouterr().out
    for opt in config_doc.options():
        assert f"`{opt.path}`" in out
    for path in UNSUPPORTED:
        assert f"`{path}`\n\nNot supported: " in out
    assert "## `client.ping_interval`\n\nType: `duration`. Default: `25s`\n\n" in out
    assert "Env: `CENTRIFUGO_CLIENT_PING_INTERVAL`" in out
    assert "`channel.namespaces[].history_size`" in out


def test_configdoc_section_and_base_level(capsys: pytest.CaptureFixture[str]) -> None:
    assert centrifugo_cli.main("configdoc", ["-m", "-s", "prometheus", "-l", "2"]) == 0
    out = capsys.readouterr().out
    headings = [line for line in out.splitlines() if line.startswith("#")]
    assert headings and all(line.startswith("#### `prometheus.") for line in headings)


def test_configdoc_page_is_served() -> None:
    with serving(dev_cli.configdoc_server("127.0.0.1", 0, "websocket")) as url:
        status, kind, body = _get(url + "/")
    assert status == 200 and kind == "text/html; charset=utf-8"
    assert b"<code>websocket.handler_prefix</code>" in body and b"client.ping_interval" not in body


def test_serve_serves_a_directory(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hello</p>")
    with serving(dev_cli.static_server("127.0.0.1", 0, str(tmp_path))) as url:
        status, _, body = _get(url + "/index.html")
    assert status == 200 and body == b"<p>hello</p>"


def test_serve_flags_are_centrifugos() -> None:
    parser = centrifugo_cli._parser("serve")
    args = parser.parse_args([])
    assert (args.dir, args.port, args.address) == ("./", 3000, "")
    args = centrifugo_cli._parser("configdoc").parse_args([])
    assert (args.markdown, args.section, args.port, args.base_level) == (False, "", 6060, 0)
