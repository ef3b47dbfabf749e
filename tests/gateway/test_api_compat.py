"""Server API fields that Centrifugo honours and Taskcast once accepted and ignored (issue 19's
"silent drift"): publish ``version``/``version_epoch``, ``subscribe`` ``expire_at``/``info``/
``b64info``/``data``/``b64data``, ``refresh`` ``info``, ``batch`` ``parallel``. In-process: a real
Node on the memory engine, the real ``ServerApi``, recording transports for the connections."""

from __future__ import annotations

import orjson

from gateway.api import ServerApi
from tests.gateway.recording import Harness


async def test_publish_version_drops_older_and_equal_versions():
    h = Harness()
    api = ServerApi(h.node, h.settings)
    first = await api.call("publish", {"channel": "v", "data": {"n": 1}, "version": 2})
    stale = await api.call("publish", {"channel": "v", "data": {"n": 0}, "version": 1})
    newer = await api.call(
        "broadcast", {"channels": ["v"], "data": {"n": 3}, "version": 3, "version_epoch": ""}
    )
    assert stale == first  # Centrifugo answers the current top for a suppressed publication
    assert newer["responses"][0]["result"]["offset"] == 2
    history = await api.call("history", {"channel": "v", "limit": -1})
    assert [p["data"] for p in orjson.loads(orjson.dumps(history))["publications"]] == [{"n": 1}, {"n": 3}]
