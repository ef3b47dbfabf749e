"""HTTP input bounds of the Status API, in-process (issue 14, defects 1, 2 and 4).

* Numbers: every body number must be a safe integer (|n| <= 2^53-1) or a finite double, strings
  valid Unicode — else a coded 422 and nothing stored, so whatever is acknowledged is publishable.
* Depth: JSON nested deeper than ``http.max_json_depth`` is a coded 422, never a 500.
* Bodies: no route is handed more than ``http.max_body_bytes``; checked by the bytes the app pulls
  from ``receive``, for every route, with and without ``Content-Length``.

The listener's own bounds (431 heads, deadline) and the memory of a real process are in
``test_listener.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from status_api.json_input import MAX_SAFE_INTEGER, JsonInputError, check_value, parse
from tests.status_api.harness import ADMIN, COORDINATOR, Harness, auth, user_token

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

BIG = [
    "18446744073709551616",  # 2^64: beyond any 64-bit column and orjson (the relay dead-lettered it)
    str(MAX_SAFE_INTEGER + 1),
    str(-(MAX_SAFE_INTEGER + 1)),
    "1" * 5000,
]
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


def _with_number(body: dict[str, Any], path: tuple[str, ...], number: str) -> bytes:
    """``body`` as JSON text with the placeholder at ``path`` replaced by the literal ``number``."""
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "__NUMBER__"
    return json.dumps(body).replace('"__NUMBER__"', number).encode()


# --- pure rules ------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", BIG + NON_FINITE)
def test_parse_refuses_numbers_no_consumer_carries(literal: str) -> None:
    with pytest.raises(JsonInputError) as err:
        parse(f'{{"a": [1, {literal}]}}'.encode())
    assert err.value.code == "NUMBER_OUT_OF_RANGE"


@pytest.mark.parametrize(
    "literal", [str(MAX_SAFE_INTEGER), str(-MAX_SAFE_INTEGER), "1e308", "-0", "1.5e-320"]
)
def test_parse_accepts_the_edges(literal: str) -> None:
    assert parse(f"[{literal}]".encode()) == [json.loads(literal)]


@pytest.mark.parametrize(
    "raw",
    [b'"\\ud800"', b'{"\\udfff": 1}', b"\xff\xfe", b"{", b""],
)
def test_parse_refuses_text_that_cannot_be_encoded(raw: bytes) -> None:
    with pytest.raises(JsonInputError) as err:
        parse(raw)
    assert err.value.code == "INVALID_JSON"


@pytest.mark.parametrize("depth", [33, 500, 10_000, 200_000])
def test_parse_refuses_deep_documents_without_recursion(depth: int) -> None:
    with pytest.raises(JsonInputError) as err:
        parse(b"[" * depth + b"]" * depth)
    assert err.value.code == "JSON_TOO_DEEP"
    assert parse(b"[" * 32 + b"]" * 32) is not None
    with pytest.raises(JsonInputError):
        check_value({"a": [[[[1]]]]}, max_depth=4)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_json_values, st.booleans())
def test_whatever_parse_accepts_the_relay_can_encode_unchanged(value: Any, ascii_only: bool) -> None:
    """The property behind defect 1: acknowledged ⇒ publishable (orjson, as the relay encodes)."""
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        parsed = parse(raw)
    except JsonInputError:
        return
    assert orjson.loads(orjson.dumps(parsed)) == parsed
    assert parsed == json.loads(raw)  # the orjson fast path reads exactly what the stdlib reads


@pytest.mark.parametrize(
    "raw",
    [b'{"id": "1234567890123456789012"}', b'{"n": 123456789012345}', b'{"n": 9007199254740991}', b"[[[]]]"],
)
def test_fast_and_exact_paths_agree(raw: bytes) -> None:
    assert parse(raw) == json.loads(raw)


# --- through the routes ----------------------------------------------------------------------


@pytest.mark.parametrize("literal", [BIG[0], BIG[1], "NaN", "Infinity", "1e400"])
@pytest.mark.parametrize(
    "path",
    [("data", "value", "currentPage"), ("progress", "current"), ("sourceSeq",), ("durationMs",)],
)
async def test_event_numbers_out_of_range_are_refused_and_nothing_is_stored(
    h: Harness, path: tuple[str, ...], literal: str
) -> None:
    task = await h.create_task()
    await h.report(task, "01_prepare", "STEP_STARTED", "PREPARING")
    await h.report(task, "01_prepare", "STEP_COMPLETED", "PREPARED")
    await h.report(task, "02_parse", "STEP_STARTED", "PARSING")
    before = len(await h.outbox_rows(task.id))
    body = h.step_event(
        task,
        "02_parse",
        "STEP_PROGRESS",
        "PARSING",
        progress={"current": 18, "total": 36, "unit": "page"},
        data={"schema": "document.parse.progress.v1", "value": {"currentPage": 18, "totalPages": 36}},
        durationMs=5,
    )
    r = await h.http.post(
        "/internal/v1/task-events",
        content=_with_number(body, path, literal),
        headers={**auth(task.steps["02_parse"].token), "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE"
    assert len(await h.outbox_rows(task.id)) == before


async def test_every_body_route_refuses_unsafe_numbers(h: Harness) -> None:
    """Create, correction, registry publish, batchGet, subscription token/release all parse bodies
    the same way."""
    task = await h.create_task()
    user = auth(user_token("t1", "u1"))
    routes: list[tuple[str, dict[str, str]]] = [
        ("/internal/v1/tasks", auth(COORDINATOR)),
        (f"/admin/v1/tasks/{task.id}/corrections", auth(ADMIN)),
        ("/admin/v1/registry/status-definitions", auth(ADMIN)),
        ("/api/tasks/status:batchGet", user),
        ("/api/realtime/subscription-token", user),
        ("/api/realtime/subscription-release", user),
    ]
    for path, headers in routes:
        for literal in (BIG[0], "NaN"):
            r = await h.http.post(
                path,
                content=f'{{"x": {literal}}}'.encode(),
                headers={**headers, "Content-Type": "application/json"},
            )
            assert r.status_code == 422, (path, r.text)
            assert r.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE", (path, r.text)


async def test_create_task_with_a_64_bit_overflow_is_refused(h: Harness) -> None:
    """The reported case: 2^64 in a create body passed the schemas and was stored."""
    body = {
        "tenantId": "t1",
        "ownerId": "u1",
        "product": "DOCUMENT",
        "taskType": "DOCUMENT_PROCESS",
        "title": "x",
        "statusDefinitionVersion": 1,
        "operationDefinitionVersion": "__NUMBER__",
        "steps": [{"stepId": "01_prepare", "operationCode": "FILE.PREPARE", "producerId": "file-worker"}],
    }
    raw = json.dumps(body).replace('"__NUMBER__"', "18446744073709551617").encode()
    r = await h.http.post(
        "/internal/v1/tasks", content=raw, headers={**auth(COORDINATOR), "Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "NUMBER_OUT_OF_RANGE", r.text


@pytest.mark.parametrize("depth", [100, 10_000])
async def test_deep_json_is_a_coded_422_on_every_body_route(
    h: Harness, depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    user = auth(user_token("t1", "u1"))
    deep = b'{"a":' * depth + b"1" + b"}" * depth
    for path, headers in (
        ("/internal/v1/task-events", auth(COORDINATOR)),
        ("/internal/v1/tasks", auth(COORDINATOR)),
        ("/api/tasks/status:batchGet", user),
    ):
        if len(deep) > 65536:
            deep = b"[" * 30000 + b"]" * 30000  # under the body bound, far over the depth bound
        r = await h.http.post(path, content=deep, headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 422, (path, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "JSON_TOO_DEEP"
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "query",
    [
        "limit=1_0",
        "limit=%2B1",
        "limit=%D9%A3",
        "limit=-1",
        "afterTaskVersion=" + "9" * 30,
        "afterTaskVersion=1e3",
    ],
)
async def test_query_integers_are_plain_bounded_digits(h: Harness, query: str) -> None:
    task = await h.create_task()
    r = await h.http.get(f"/api/tasks/{task.id}/events?{query}", headers=auth(user_token("t1", "u1")))
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] in ("INVALID_QUERY", "NUMBER_OUT_OF_RANGE")


# --- body bound on every route, by bytes pulled from receive -----------------------------------


CHUNK = 16 * 1024


class EndlessBody:
    """An ASGI ``receive`` that hands out body chunks forever and counts the bytes pulled."""

    def __init__(self) -> None:
        self.pulled = 0

    async def __call__(self) -> dict[str, Any]:
        if self.pulled > 64 * 1024 * 1024:  # the bound failed: stop the test instead of the machine
            return {"type": "http.request", "body": b"", "more_body": False}
        self.pulled += CHUNK
        return {"type": "http.request", "body": b"[" * CHUNK, "more_body": True}


_PARAMS = {"{task_id}": "t-1", "{step_id}": "s-1", "{kind}": "status-definitions"}


def _routes(h: Harness) -> list[tuple[str, str]]:
    """Every (method, concrete path) the app serves, the board's static mounts included."""
    out = []
    for route in h.app.routes:
        path = getattr(route, "path", "")
        for key, value in _PARAMS.items():
            path = path.replace(key, value)
        methods = getattr(route, "methods", None) or {"GET", "POST"}
        out += [(m, path or "/") for m in sorted(methods) if m != "HEAD"]
    return out


async def _call(
    h: Harness, method: str, path: str, headers: list[tuple[bytes, bytes]], receive: Callable[[], Any]
) -> tuple[int, list[tuple[bytes, bytes]]]:
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("status", 80),
        "state": {},
    }
    await h.app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], start["headers"]


async def test_no_route_reads_a_chunked_body_past_the_bound(h: Harness) -> None:
    limit = 65536
    tokens = {"/internal": COORDINATOR, "/admin": ADMIN}
    routes = _routes(h)
    assert len(routes) >= 17, routes
    for method, path in routes:
        token = next((t for prefix, t in tokens.items() if path.startswith(prefix)), user_token("t1", "u1"))
        body = EndlessBody()
        headers = [(b"authorization", f"Bearer {token}".encode()), (b"transfer-encoding", b"chunked")]
        status, resp_headers = await _call(h, method, path, headers, body)
        assert body.pulled <= limit + CHUNK, (method, path, body.pulled)
        if body.pulled > limit and method != "GET":
            # A route that reads its body answers 413; a GET that never wanted one (a file response
            # only listens for a disconnect) may finish its answer: the bytes pulled stay bounded.
            assert status == 413, (method, path, status)
        # the rest of an unread body is not drained for keep-alive
        assert (b"connection", b"close") in resp_headers, (method, path)


async def test_a_declared_oversized_body_is_refused_before_reading(h: Harness) -> None:
    for method, path in _routes(h):
        body = EndlessBody()
        headers = [(b"authorization", f"Bearer {COORDINATOR}".encode()), (b"content-length", b"268435456")]
        status, resp_headers = await _call(h, method, path, headers, body)
        assert (status, body.pulled) == (413, 0), (method, path)
        assert (b"connection", b"close") in resp_headers


async def test_a_body_of_exactly_the_bound_is_read(h: Harness) -> None:
    head, tail = b'{"taskIds": [], "pad": "', b'"}'
    raw = head + b"x" * (65536 - len(head) - len(tail)) + tail
    r = await h.http.post("/api/tasks/status:batchGet", content=raw, headers=auth(user_token("t1", "u1")))
    assert len(raw) == 65536 and r.status_code == 422, r.text  # read and parsed: the schema refuses "pad"
    r = await h.http.post(
        "/api/tasks/status:batchGet", content=raw + b" ", headers=auth(user_token("t1", "u1"))
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "BODY_TOO_LARGE"


async def test_rejected_events_do_not_turn_body_text_into_metric_labels(h: Harness) -> None:
    """Labels of rejected events come from the verified credential, not from the body."""
    task = await h.create_task()
    for i in range(5):
        body = h.step_event(task, "01_prepare", "STEP_STARTED", "PREPARING", operationCode=f"ATTACK.{i}")
        await h.send(body, task.steps["01_prepare"].token, expect=403)
    text = (await h.http.get("/metrics")).text
    assert "ATTACK." not in text
