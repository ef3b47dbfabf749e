"""The test backend of the webhook tests: a stdlib HTTP server on a thread that records every
POST and checks its signature with the verifier docs/webhooks.md prints (``doc_verifier``)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from tests.support import scaled

DOC = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"


def doc_verifier() -> Any:
    """``verify_taskcast_webhook`` exactly as docs/webhooks.md prints it."""
    text = DOC.read_text()
    block = re.search(r"<!-- webhook-verify-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert block is not None, "the verification example is missing from docs/webhooks.md"
    scope: dict[str, Any] = {}
    exec(compile(block.group(1), str(DOC), "exec"), scope)  # the documented code, unchanged
    return scope["verify_taskcast_webhook"]


@dataclass
class Received:
    path: str
    verified: bool
    events: list[dict[str, Any]]


class Receiver:
    """The backend: records every POST, answers per path: ``ok`` (204), ``down`` (503) or
    ``hang`` (holds the request until the mode changes), ``redirect`` (307 to ``/redirected``),
    ``refuse`` (400)."""

    def __init__(self, secret: str) -> None:
        verify = doc_verifier()
        self.requests: list[Received] = []
        self.modes: dict[str, str] = {}
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = verify(
                    secret,
                    self.headers.get("X-Taskcast-Timestamp", ""),
                    self.headers.get("X-Taskcast-Signature", ""),
                    body,
                )
                with receiver.changed:
                    receiver.requests.append(Received(self.path, ok, orjson.loads(body)["events"]))
                    receiver.changed.notify_all()
                    receiver.changed.wait_for(
                        lambda: receiver.modes.get(self.path) != "hang", timeout=scaled(30)
                    )
                    mode = receiver.modes.get(self.path, "ok")
                self.send_response({"down": 503, "redirect": 307, "refuse": 400}.get(mode, 204))
                if mode == "redirect":
                    self.send_header("Location", "/redirected")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def set_modes_ok(self) -> None:
        """Release every held request (at shutdown)."""
        with self.changed:
            self.modes.clear()
            self.changed.notify_all()

    def set_mode(self, path: str, mode: str) -> None:
        with self.changed:
            self.modes[path] = mode
            self.changed.notify_all()

    def events(self, path: str = "/main", **match: Any) -> list[dict[str, Any]]:
        """Distinct events (by id) POSTed to ``path`` whose fields equal ``match``."""
        seen: dict[str, dict[str, Any]] = {}
        with self.changed:
            for request in self.requests:
                if request.path == path:
                    for event in request.events:
                        seen.setdefault(event["id"], event)
        return [e for e in seen.values() if all(e.get(k) == v for k, v in match.items())]


@contextmanager
def serving(secret: str) -> Iterator[Receiver]:
    """A running ``Receiver`` checking signatures made with ``secret``; stopped on exit."""
    recv = Receiver(secret)
    thread = threading.Thread(target=recv.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recv
    finally:
        recv.set_modes_ok()
        recv.server.shutdown()
        recv.server.server_close()
        thread.join()
