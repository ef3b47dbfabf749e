"""Serves the demo task board (``client-js/board``) and the built client bundle (``client-js/dist``)
under ``/board/``. Static files only: the page talks to this API's user endpoints and to the
gateway like any browser. Imports nothing from the rest of ``status_api``.

``client-js/dist`` is built by ``npm run build`` in client-js (scripts/bootstrap.sh does it); a
missing build answers 404 with a hint instead of failing at startup.
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

CLIENT_JS = Path(__file__).resolve().parents[1] / "client-js"


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


def routes(client_js: Path = CLIENT_JS) -> list[BaseRoute]:
    """``/board/dist/*`` from the built bundle, everything else under ``/board/`` from the page."""
    page = StaticFiles(directory=client_js / "board", html=True, check_dir=False)
    return [
        Mount("/board/dist", app=_BuiltFiles(client_js / "dist"), name="board-dist"),
        Mount("/board", app=page, name="board"),
    ]
