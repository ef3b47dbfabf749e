"""Serves the task board (``client-js/board``) and the built client bundle (``client-js/dist``)
under ``/board/``, the favicon, and a landing page at ``/`` that points to the board, the API's
own endpoints and the docs. Static files only: the page talks to this API's user endpoints and to
the gateway like any browser. Imports nothing from the rest of ``status_api``.

``client-js/dist`` is built by ``npm run build`` in client-js (scripts/bootstrap.sh does it); a
missing build answers 404 with a hint instead of failing at startup.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

CLIENT_JS = Path(__file__).resolve().parents[1] / "client-js"
DEMO_USERS = ("demo/alice", "demo/bob", "demo/carol")
DOCS = (
    ("docs/quickstart.md", "Quickstart: run everything, open the board"),
    ("docs/status-api.md", "Status API: endpoints, auth, errors"),
    ("docs/client-js.md", "client-js: TaskFeed, install, React binding"),
    ("docs/task-protocol.md", "Task protocol: events, versions, notices"),
)
ENDPOINTS = (
    ("/board/", "Task board"),
    ("/openapi.json", "OpenAPI description"),
    ("/healthz", "Liveness"),
    ("/readyz", "Readiness (database reachable)"),
    ("/metrics", "Prometheus metrics"),
)


class _BuiltFiles:
    """StaticFiles over a directory that may not exist yet (the bundle is a build output)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = StaticFiles(directory=directory, check_dir=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.directory.is_dir():
            hint = "client-js/dist is not built: run `npm run build` in client-js"
            await PlainTextResponse(hint, status_code=404)(scope, receive, send)
            return
        await self.files(scope, receive, send)


def landing_html() -> str:
    """The ``/`` page: what this server is and where to go next (no data, no secrets)."""
    users = " · ".join(f'<a href="/board/?user={escape(u)}">{escape(u)}</a>' for u in DEMO_USERS)
    endpoints = "".join(
        f'<li><a href="{escape(p)}"><code>{escape(p)}</code></a> {escape(t)}</li>' for p, t in ENDPOINTS
    )
    docs = "".join(f"<li><code>{escape(p)}</code> {escape(t)}</li>" for p, t in DOCS)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Taskcast Status API</title><link rel="icon" type="image/svg+xml" href="/favicon.ico">
<style>
body{{font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1c2330;
background:#f5f6f8;margin:0}}
main{{max-width:680px;margin:40px auto;padding:0 18px}}
section{{background:#fff;border:1px solid #e6e8ee;border-radius:14px;padding:22px 26px;margin-bottom:16px}}
h1{{font-size:22px;margin:0 0 6px}}
h2{{font-size:13px;text-transform:uppercase;letter-spacing:.06em;color:#6b7485}}
a{{color:#2f6fed;font-weight:600;text-decoration:none}} code{{font-size:13px}} ul{{padding-left:18px}}
.cta{{display:inline-block;background:#2f6fed;color:#fff;border-radius:8px;padding:8px 14px;margin:8px 0}}
.muted{{color:#6b7485}}
</style></head>
<body><main>
<section><h1>Taskcast Status API</h1>
<p class="muted">The source of truth for task status: coordinators and workers report here, browsers read
snapshots here and follow changes through the realtime gateway.</p>
<a class="cta" href="/board/">Open the task board</a>
<p class="muted">With development user auth (<code>user_auth.mode: dev</code>, as in <code>taskcast up</code>)
open it as a demo user: {users}</p></section>
<section><h2>This server</h2><ul>{endpoints}</ul></section>
<section><h2>Docs (in the repository)</h2><ul>{docs}</ul></section>
</main></body></html>"""


async def landing(request: Request) -> Response:
    """``GET /``: the landing page, or a short JSON index for ``Accept: application/json``."""
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/html" not in accept:
        return JSONResponse(
            {
                "service": "taskcast-status-api",
                "board": "/board/",
                "openapi": "/openapi.json",
                "health": "/healthz",
                "ready": "/readyz",
                "docs": [p for p, _ in DOCS],
            }
        )
    return HTMLResponse(landing_html())


def page_config_js(gateway_url: str | None) -> str:
    """``/board/config.js``: the page's settings as a classic script that runs before the page's
    module (``window.TASKCAST_BOARD``); ``gateway`` is absent when unset, ``""`` for the page's own
    origin. JSON-encoded, with ``<`` escaped, so no value can close the script."""
    settings: dict[str, str] = {} if gateway_url is None else {"gateway": gateway_url.rstrip("/")}
    body = json.dumps(settings).replace("<", "\\u003c")
    return f"window.TASKCAST_BOARD = {body};\n"


def routes(client_js: Path = CLIENT_JS, *, gateway_url: str | None = None) -> list[BaseRoute]:
    """``/`` (landing), ``/favicon.ico``, ``/board/config.js`` (the page's settings:
    ``board.gateway_url``), ``/board/dist/*`` from the built bundle, everything else under
    ``/board/`` from the page."""
    page = StaticFiles(directory=client_js / "board", html=True, check_dir=False)
    icon = client_js / "board" / "favicon.svg"

    async def favicon(request: Request) -> Response:
        if not icon.is_file():
            return PlainTextResponse("no favicon", status_code=404)
        return FileResponse(icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    config_js = page_config_js(gateway_url)

    async def page_config(request: Request) -> Response:
        return Response(
            config_js, media_type="text/javascript; charset=utf-8", headers={"Cache-Control": "no-cache"}
        )

    return [
        Route("/", landing, methods=["GET"], name="landing"),
        Route("/board/config.js", page_config, methods=["GET"], name="board-config"),
        Route("/favicon.ico", favicon, methods=["GET"], name="favicon"),
        Mount("/board/dist", app=_BuiltFiles(client_js / "dist"), name="board-dist"),
        Mount("/board", app=page, name="board"),
    ]
