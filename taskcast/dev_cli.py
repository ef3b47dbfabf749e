"""Centrifugo's two development helpers: ``configdoc`` (the configuration reference generated from
the code) and ``serve`` (a static file server), with Centrifugo v6's flags and output.

``taskcast configdoc`` serves the reference as an HTML page on ``-p`` (6060) and tries to open a
browser on it; ``-m`` prints Markdown instead, ``-s`` keeps the options under one top-level
section, ``-l`` shifts the heading levels. Every option is listed: the supported ones with their
type, default and environment variable, the unsupported Centrifugo ones with what to do instead
(gateway/config/doc.py and gateway/config/unsupported.py are the source).

``taskcast serve`` serves the files of ``-d`` (./) on ``-a``:``-p`` (all interfaces, 3000), for
trying a page that connects to the gateway; it prints ``start serving <dir> on <address>``.
Both are for development only: they bind where told and serve until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import json
import threading
import webbrowser
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.config import doc as config_doc
from gateway.config.unsupported import UNSUPPORTED, UNSUPPORTED_CHANNEL_OPTIONS, env_name

CONFIGDOC_PORT = 6060
SERVE_PORT = 3000


@dataclass(frozen=True, slots=True)
class Entry:
    """One option of the reference: dotted path, kind, default text, env variable, comment."""

    path: str
    kind: str
    default: str
    env: str
    comment: str


def entries() -> Iterator[Entry]:
    """Every option: supported ones in declaration order (namespace options under
    ``channel.namespaces[]``), then the unsupported Centrifugo ones sorted by path."""
    for opt in config_doc.options():
        yield _supported(opt, opt.path, env_name(opt.path))
    yield Entry(
        "channel.namespaces", "list of objects", "[]", env_name("channel.namespaces"),
        "Channel namespaces, each with a `name` and the options below.",
    )  # fmt: skip
    for opt in config_doc.channel_options():
        path = f"channel.namespaces[].{opt.path}"
        env = env_name("channel.namespaces") + "_<NAME>_" + opt.path.upper().replace(".", "_")
        yield _supported(opt, path, env)
    for path, advice in sorted(UNSUPPORTED.items()):
        yield Entry(path, "", "", "", f"Not supported: {advice}.")
    for name, advice in sorted(UNSUPPORTED_CHANNEL_OPTIONS.items()):
        yield Entry(f"channel.namespaces[].{name}", "", "", "", f"Not supported: {advice}.")


def _supported(opt: config_doc.Option, path: str, env: str) -> Entry:
    if opt.kind == "duration":
        default = config_doc.duration_text(opt.default)
    else:
        default = "" if opt.default in ("", None) else json.dumps(opt.default)
    comment = "Taskcast extension (Centrifugo has no such option)." if opt.extension else "Supported."
    return Entry(path, opt.kind, default, env, comment)


def markdown(section: str = "", base_level: int = 0) -> str:
    """The reference as Markdown: a heading per option (its depth is its level, plus
    ``base_level``, at most 6), type and default, env variable, comment."""
    parts: list[str] = []
    for entry in entries():
        if section and not entry.path.startswith(section):
            continue
        level = min(entry.path.count(".") + 1 + base_level, 6)
        lines = [f"{'#' * level} `{entry.path}`", ""]
        if entry.kind:
            type_line = f"Type: `{entry.kind}`" + (f". Default: `{entry.default}`" if entry.default else "")
            lines += [type_line, ""]
        if entry.env:
            lines += [f"Env: `{entry.env}`", ""]
        lines += [entry.comment, ""]
        parts.append("\n".join(lines))
    return "\n".join(parts)


def page(section: str = "") -> str:
    """The reference as one HTML page (a table with a row per option)."""
    rows = "".join(
        "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>".format(
            *(html.escape(cell) for cell in (e.path, e.kind, e.default, e.env, e.comment))
        )
        for e in entries()
        if not section or e.path.startswith(section)
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>Taskcast configuration options</title><style>body{font-family:sans-serif;margin:2rem}"
        "td,th{border-bottom:1px solid #ddd;padding:.3rem;text-align:left;vertical-align:top}</style>"
        "</head><body><h1>Taskcast configuration options</h1><table><tr><th>option</th><th>type</th>"
        f"<th>default</th><th>env variable</th><th>note</th></tr>{rows}</table></body></html>"
    )


class _PageHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        return


def configdoc_server(address: str, port: int, section: str = "") -> http.server.ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server answering every GET with the reference page."""
    handler = type("ConfigDocHandler", (_PageHandler,), {"body": page(section).encode()})
    return http.server.ThreadingHTTPServer((address, port), handler)


def static_server(address: str, port: int, directory: str) -> http.server.ThreadingHTTPServer:
    """A bound (not yet serving) HTTP server of the files under ``directory``."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    return http.server.ThreadingHTTPServer((address, port), handler)


def _bound(server: http.server.ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    text = host.decode() if isinstance(host, bytes) else str(host)
    return f"{text if text not in ('0.0.0.0', '') else ''}:{port}"


def configdoc(args: argparse.Namespace) -> None:
    if args.markdown:
        print(markdown(args.section, args.base_level))
        return
    server = configdoc_server("", args.port, args.section)
    url = f"http://localhost:{server.server_address[1]}"
    threading.Thread(target=_open_browser, args=(url,), daemon=True).start()
    with server, contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def _open_browser(url: str) -> None:
    try:
        opened = webbrowser.open(url)
    except webbrowser.Error as exc:
        print(f"Failed to open browser automatically: {exc}, see {url}", flush=True)
        return
    if not opened:
        print(f"Failed to open browser automatically, see {url}", flush=True)


def serve(args: argparse.Namespace) -> None:
    server = static_server(args.address, args.port, args.dir)
    print(f"start serving {args.dir} on {_bound(server)}", flush=True)
    with server, contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The flags of ``configdoc`` / ``serve`` (Centrifugo's names and defaults)."""
    if command == "configdoc":
        parser.add_argument("-m", "--markdown", action="store_true", help="output markdown to stdout")
        parser.add_argument("-s", "--section", default="", help="filter by top-level section name")
        parser.add_argument("-p", "--port", type=int, default=CONFIGDOC_PORT, help="port to run server on")
        parser.add_argument("-l", "--base-level", type=int, default=0, help="base level to use")
    else:
        parser.add_argument("-d", "--dir", default="./", help="path to directory")
        parser.add_argument("-p", "--port", type=int, default=SERVE_PORT, help="port to serve on")
        parser.add_argument(
            "-a", "--address", default="", help="interface to serve on (default: all interfaces)"
        )
