"""Serves the demo task board (``client-js/board``) and the built client bundle (``client-js/dist``)
under ``/board/``. Static files only: the page talks to this API's user endpoints and to the
gateway like any browser. Imports nothing from the rest of ``status_api``.

``client-js/dist`` is built by ``npm run build`` in client-js (scripts/bootstrap.sh does it); a
missing build answers 404 for the bundle instead of failing at startup.
"""

from __future__ import annotations

from pathlib import Path

from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

CLIENT_JS = Path(__file__).resolve().parents[1] / "client-js"


def routes(client_js: Path = CLIENT_JS) -> list[BaseRoute]:
    """``/board/dist/*`` from the built bundle, everything else under ``/board/`` from the page."""
    dist = StaticFiles(directory=client_js / "dist", check_dir=False)
    page = StaticFiles(directory=client_js / "board", html=True, check_dir=False)
    return [Mount("/board/dist", app=dist, name="board-dist"), Mount("/board", app=page, name="board")]
