"""The event POST on a real listener is answered by the connection itself (status_api/event_inline.py)
and keeps what the ASGI stack gives it; the requests it must not take still reach the app.

The whole HTTP suites run through this path too: ``TASKCAST_TEST_STATUS_LISTENER=1`` serves the
harness's app on a listener (tests/status_api/listener_transport.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from status_api.app import create_app
from status_api.event_inline import EventInline
from status_api.storage.database import create_engine, init_db
from tests.status_api.harness import (
    TEST_CONFIG,
    FakeClock,
    Harness,
    auth,
    build,
    load_config_dict,
)
from tests.status_api.listener_transport import ListenerTransport


@pytest.fixture
async def lh(tmp_path: Any) -> AsyncIterator[Harness]:
    """A harness on SQLite whose client speaks to a real listener."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/status.db")
    await init_db(engine)
    clock = FakeClock()
    h = Harness(build(engine, clock), clock)
    await h.http.aclose()
    h.http = httpx.AsyncClient(transport=ListenerTransport(h.app), base_url="http://status")
    await h.service.load_registry_files()
    yield h
    await h.http.aclose()
    await engine.dispose()


def _inline(h: Harness) -> EventInline:
    handler = h.app.state.event_inline
    assert isinstance(handler, EventInline)
    return handler


async def test_the_event_post_is_answered_inline_with_the_route_s_answer(lh: Harness) -> None:
    task = await lh.create_task()
    before = _inline(lh).answered
    out = await lh.report(task, "01_prepare", "STEP_STARTED", "PREPARING")
    assert out["accepted"] is True and out["taskId"] == task.id
    assert _inline(lh).answered == before + 1
    # A refused one too, with its machine-readable code.
    r = await lh.http.post("/internal/v1/task-events", content=b"{", headers=auth("not-a-token"))
    assert r.status_code == 401 and r.json()["error"]["code"]
    assert r.headers["content-type"] == "application/json"
    assert _inline(lh).answered == before + 2


async def test_requests_the_stack_must_see_are_not_taken_inline(lh: Harness) -> None:
    task = await lh.create_task()
    handler = _inline(lh)
    body = lh.step_event(task, "01_prepare", "STEP_STARTED", "PREPARING")
    token = task.steps["01_prepare"].token
    before = handler.answered
    # Origin (CORS decides), a proxy header, a chunked body: the ASGI app answers, same result.
    r = await lh.http.post(
        "/internal/v1/task-events", json=body, headers={**auth(token), "Origin": "https://evil.example"}
    )
    assert r.status_code in (200, 403), r.text
    r = await lh.http.post(
        "/internal/v1/task-events", json=body, headers={**auth(token), "X-Forwarded-For": "10.0.0.1"}
    )
    assert r.status_code == 200 and r.json()["taskId"] == task.id

    async def chunks() -> AsyncIterator[bytes]:
        yield b"{}"

    r = await lh.http.post("/internal/v1/task-events", content=chunks(), headers=auth(token))
    assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_EVENT", r.text
    assert handler.answered == before


async def test_metrics_and_access_log_of_an_inline_answer(
    lh: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    task = await lh.create_task()
    caplog.set_level(logging.INFO, "uvicorn.access")
    # A fresh connection: the protocol reads whether the access log is on when it is made.
    await lh.http.aclose()
    lh.http = httpx.AsyncClient(transport=ListenerTransport(lh.app), base_url="http://status")
    before = _inline(lh).answered
    await lh.report(task, "01_prepare", "STEP_STARTED", "PREPARING")
    assert _inline(lh).answered == before + 1
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any('"POST /internal/v1/task-events HTTP/1.1" 200' in line for line in lines), lines
    text = (await lh.http.get("/metrics")).text
    assert 'route="/internal/v1/task-events",status="200"' in text


async def test_cors_on_adds_vary_and_an_oversized_declared_body_goes_to_the_bound(tmp_path: Any) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/status.db")
    await init_db(engine)
    clock = FakeClock()
    comp = build(engine, clock)
    app = create_app(
        load_config_dict({**TEST_CONFIG, "cors": {"allowed_origins": ["https://ok.example"]}}),
        components=comp,
    )
    transport = ListenerTransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://status") as client:
        r = await client.post("/internal/v1/task-events", content=b"{", headers=auth("not-a-token"))
        assert r.status_code == 401 and r.headers["vary"] == "Origin"
        assert app.state.event_inline.answered == 1
        # Declared past http.max_body_bytes: 413 from the body bound, before the body, closed.
        reader, writer = await asyncio.open_connection("127.0.0.1", transport.port)
        writer.write(b"POST /internal/v1/task-events HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999\r\n\r\n")
        got = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        assert got.startswith(b"HTTP/1.1 413") and b"connection: close" in got.lower(), got
        assert app.state.event_inline.answered == 1
    await engine.dispose()
