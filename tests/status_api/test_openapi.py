"""schema/openapi.yaml is served at /openapi.json and documents exactly the routes the app has."""

from __future__ import annotations

import re

from status_api import operator_ui, subscribe_proxy, telemetry
from status_api.http import routes
from tests.status_api.harness import Harness


async def test_openapi_served_and_matches_routes(h: Harness) -> None:
    r = await h.http.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    documented = {(p, m.upper()) for p, ops in doc["paths"].items() for m in ops}
    actual = set()
    pages = [r for r in operator_ui.routes if r.path.startswith("/admin/ui/")]  # static HTML, as /board/
    api = [r for r in operator_ui.routes if r not in pages]
    for route in [*routes, *telemetry.routes, *subscribe_proxy.routes, *api]:
        path = re.sub(r"\{(\w+)\}", lambda m: "{" + _camel(m.group(1)) + "}", route.path)
        actual |= {(path, m) for m in (route.methods or set()) if m != "HEAD"}
    assert documented == actual
    assert (await h.http.get("/readyz")).json() == {"status": "ready"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)
