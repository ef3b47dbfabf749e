"""HttpGatewayPublisher against scripted gateway replies (a real HTTP/1.1 server on loopback that
answers each request with a handler's ``httpx.Response``) and a closed port: per-row results from
/api/batch, whole-request failures, poison isolation, secrets in errors; the keep-alive client's
connection reuse, a server-closed idle connection, chunked replies; a VERSION row's publications
(one command each, results merged per row, a malformed payload DEAD alone, split requests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime

import httpx
import orjson
import pytest
import pytest_asyncio

from relay import publisher as publisher_module
from relay.http_client import KeepAliveClient
from relay.publisher import (
    COMMITTED_AT_TAG,
    PUBLISHED,
    PUBLISHED_AT_TAG,
    HttpGatewayPublisher,
    Outcome,
    PublishResult,
    committed_at_ms,
)
from status_api.storage.outbox import VERSION_PROJECTION, OutboxRow
from tests.support import free_port

KEY = "publisher-test-key-0123456789"


def row(rid: int, channel: str = "task_user:t1/u1", payload: object = None) -> OutboxRow:
    return OutboxRow(
        id=rid,
        aggregate_type="task",
        aggregate_id=f"task-{rid}",
        aggregate_version=1,
        channel=channel,
        projection="USER_SUMMARY",
        payload=payload if payload is not None else {"n": rid},  # type: ignore[arg-type]
        priority=0,
        attempts=1,
        created_at=datetime(2026, 9, 21, 7, 10, 18),
    )


Handler = Callable[[httpx.Request], httpx.Response]


class ScriptedGateway:
    """Answers every request with ``handler(request)``; a handler raising ``httpx.ReadTimeout``
    never answers. ``connections`` counts accepted connections; ``close_after_reply`` closes each
    connection right after its first reply (without ``Connection: close``: a server timing out an
    idle keep-alive connection)."""

    def __init__(self) -> None:
        self.handler: Handler = lambda r: httpx.Response(500)
        self.connections = 0
        self.close_after_reply = False
        self.raw_reply: bytes | None = None
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ")
                headers = dict(line.split(": ", 1) for line in lines[1:] if line)
                body = await reader.readexactly(int(headers.get("Content-Length", "0")))
                request = httpx.Request(method, f"http://gw{path}", headers=headers, content=body)
                if self.raw_reply is not None:
                    writer.write(self.raw_reply)
                else:
                    try:
                        resp = self.handler(request)
                    except httpx.ReadTimeout:
                        await asyncio.Event().wait()  # never answers; ends with the connection
                        return
                    content = resp.content
                    writer.write(
                        f"HTTP/1.1 {resp.status_code} X\r\nContent-Length: {len(content)}\r\n\r\n".encode()
                        + content
                    )
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()


@pytest_asyncio.fixture
async def gateway() -> AsyncIterator[ScriptedGateway]:
    gw = ScriptedGateway()
    await gw.start()
    yield gw
    await gw.stop()


@pytest.fixture
def publisher(
    gateway: ScriptedGateway,
) -> Callable[[Handler], tuple[HttpGatewayPublisher, list[httpx.Request]]]:
    def make(handler: Handler, timeout: float = 1.0) -> tuple[HttpGatewayPublisher, list[httpx.Request]]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return handler(request)

        gateway.handler = record
        return HttpGatewayPublisher(f"http://127.0.0.1:{gateway.port}/api", KEY, timeout), seen

    return make


Make = Callable[..., tuple[HttpGatewayPublisher, list[httpx.Request]]]


async def test_batch_replies_map_to_rows_in_order(publisher: Make) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/batch"
        assert request.headers["X-API-Key"] == KEY
        body = json.loads(request.content)
        assert [c["publish"]["idempotency_key"] for c in body["commands"]] == [
            "task-1:1:task_user:t1/u1",
            "task-2:1:bad:chan",
            "task-3:1:task_user:t1/u1",
        ]
        return httpx.Response(
            200,
            json={
                "replies": [
                    {"publish": {"offset": 1, "epoch": "e"}},
                    {"error": {"code": 102, "message": "unknown channel"}},
                    {"error": {"code": 100, "message": "internal server error"}},
                ]
            },
        )

    pub, _ = publisher(handler)
    results = await pub.publish([row(1), row(2, "bad:chan"), row(3)])
    assert results[0] == PUBLISHED
    assert (results[1].outcome, results[1].failure_class, results[1].gateway_unavailable) == (
        Outcome.DEAD,
        "api_102",
        False,
    )
    assert (results[2].outcome, results[2].failure_class, results[2].gateway_unavailable) == (
        Outcome.RETRY,
        "api_100",
        False,
    )
    await pub.aclose()


@pytest.mark.parametrize(("status", "klass"), [(503, "http_5xx"), (429, "http_429"), (401, "http_auth")])
async def test_whole_request_failures_retry_every_row_as_unavailability(
    publisher: Make, status: int, klass: str
) -> None:
    pub, _ = publisher(lambda r: httpx.Response(status, text=f"nope {KEY}"))
    results = await pub.publish([row(1), row(2)])
    assert all(
        r.outcome is Outcome.RETRY and r.failure_class == klass and r.gateway_unavailable for r in results
    )
    assert all(KEY not in r.error for r in results)
    await pub.aclose()


async def test_batch_refused_as_a_whole_is_retried_row_by_row_to_isolate_the_poison(publisher: Make) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/batch":
            return httpx.Response(413, text="request entity too large")
        body = json.loads(request.content)
        if body["channel"] == "huge:chan":
            return httpx.Response(413, text="request entity too large")
        return httpx.Response(200, json={"result": {}})

    pub, seen = publisher(handler)
    results = await pub.publish([row(1), row(2, "huge:chan"), row(3)])
    assert [r.outcome for r in results] == [Outcome.PUBLISHED, Outcome.DEAD, Outcome.PUBLISHED]
    assert [r.url.path for r in seen] == ["/api/batch"] + ["/api/publish"] * 3
    await pub.aclose()


async def test_unserializable_payload_is_dead_and_the_rest_still_publish(publisher: Make) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["commands"])
        return httpx.Response(200, json={"replies": [{"publish": {}}] * n})

    pub, seen = publisher(handler)
    results = await pub.publish([row(1), row(2, payload={"bad": {1, 2}}), row(3)])
    assert [r.outcome for r in results] == [Outcome.PUBLISHED, Outcome.DEAD, Outcome.PUBLISHED]
    assert results[1].failure_class == "encode"
    assert len(seen) == 1 and len(json.loads(seen[0].content)["commands"]) == 2
    await pub.aclose()


async def test_timeout_and_malformed_replies_are_transient(publisher: Make) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    pub, _ = publisher(slow, timeout=0.2)
    [res] = await pub.publish([row(1)])
    assert (res.outcome, res.failure_class, res.gateway_unavailable) == (Outcome.RETRY, "timeout", True)
    await pub.aclose()

    pub, _ = publisher(lambda r: httpx.Response(200, json={"replies": []}))
    results = await pub.publish([row(1), row(2)])
    assert {(r.outcome, r.failure_class) for r in results} == {(Outcome.RETRY, "bad_response")}
    await pub.aclose()


async def test_connection_refused_is_transient() -> None:
    pub = HttpGatewayPublisher(f"http://127.0.0.1:{free_port()}/api", KEY, 1.0)
    results = await pub.publish([row(1), row(2)])
    assert results == [PublishResult(Outcome.RETRY, "connect", results[0].error, True)] * 2
    assert KEY not in results[0].error
    await pub.aclose()


async def test_single_row_uses_publish_and_api_error_message_is_kept_sanitized(publisher: Make) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/publish"
        return httpx.Response(200, json={"error": {"code": 107, "message": f"bad request api_key={KEY}"}})

    pub, _ = publisher(handler)
    [res] = await pub.publish([row(1)])
    assert res.outcome is Outcome.DEAD and res.failure_class == "api_107"
    assert "107" in res.error and KEY not in res.error
    await pub.aclose()


async def test_a_claimed_payload_is_spliced_into_the_request_as_stored(publisher: Make) -> None:
    """``outbox_claims.claim`` hands payloads on as ``orjson.Fragment`` of the stored text: the batch
    request carries those bytes unchanged (no decode, no re-encode) next to the rows' tags."""

    stored = '{"kind":"task.summary", "n": 1.50, "s":"\\u00e9"}'  # spacing and escapes kept as stored

    def handler(request: httpx.Request) -> httpx.Response:
        assert b'"data":' + stored.encode() + b"," in request.content
        n = len(json.loads(request.content)["commands"])
        return httpx.Response(200, json={"replies": [{"publish": {}}] * n})

    pub, seen = publisher(handler)
    assert await pub.publish([row(1, payload=orjson.Fragment(stored)), row(2)]) == [PUBLISHED, PUBLISHED]
    assert len(seen) == 1
    await pub.aclose()


async def test_connections_are_kept_alive_and_a_closed_idle_one_is_replaced(
    publisher: Make, gateway: ScriptedGateway
) -> None:
    pub, seen = publisher(lambda r: httpx.Response(200, json={"result": {}}))
    for i in range(3):
        assert await pub.publish([row(i)]) == [PUBLISHED]
    assert gateway.connections == 1
    gateway.close_after_reply = True  # the server drops each connection once it has answered
    for i in range(3):
        assert await pub.publish([row(i)]) == [PUBLISHED]
    assert len(seen) == 6
    await pub.aclose()


async def test_chunked_and_connection_close_replies_are_read(gateway: ScriptedGateway) -> None:
    client = KeepAliveClient(
        f"http://127.0.0.1:{gateway.port}/api", {"X-API-Key": KEY}, timeout=1.0, connect_timeout=1.0
    )
    gateway.raw_reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5;ext=1\r\n{"rep\r\n8\r\nlies":[]\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    reply = await client.post("batch", b"{}")
    assert (reply.status, reply.body) == (200, b'{"replies":[]}')
    assert await client.post("batch", b"{}") == reply and gateway.connections == 1
    gateway.raw_reply = b"HTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\nbusy"
    gateway.close_after_reply = True  # no length: the body ends with the connection
    reply = await client.post("batch", b"{}")
    assert (reply.status, reply.text) == (503, "busy")
    gateway.raw_reply = b"SMTP ready\r\n\r\n"
    with pytest.raises(OSError):
        await client.post("batch", b"{}")
    await client.aclose()


@pytest.mark.parametrize("framing", ["length", "chunked", "to-close"])
async def test_an_oversized_reply_is_refused_as_a_protocol_error_not_read(framing: str, monkeypatch) -> None:
    """A gateway (or anything at its address) answering more than the bound costs the relay no
    more than the bound: the request fails as a transient error and the rows are retried."""
    import relay.http_client as http_client

    monkeypatch.setattr(http_client, "MAX_REPLY_BYTES", 1024)
    body = b"x" * 4096

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if framing == "length":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif framing == "chunked":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n" % (len(body), body) + b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        pub = HttpGatewayPublisher(f"http://127.0.0.1:{port}/api", KEY, 5.0)
        [res] = await pub.publish([row(1)])
        assert res.outcome is Outcome.RETRY, res
        assert "over 1024 bytes" in res.error or "> 1024" in res.error, res
        await pub.aclose()
    finally:
        server.close()
        await server.wait_closed()


def version_row(rid: int, payload: object, priority: int = 0) -> OutboxRow:
    """A task version's one row (``outbox.VERSION_PROJECTION``) as a claim hands it over: the
    stored text of its array of publications."""
    return OutboxRow(
        id=rid,
        aggregate_type="task",
        aggregate_id=f"task-{rid}",
        aggregate_version=3,
        channel="task_user:t1/u1",
        projection=VERSION_PROJECTION,
        payload=payload if isinstance(payload, str) else orjson.dumps(payload).decode(),
        priority=priority,
        attempts=1,
        created_at=datetime(2026, 9, 21, 7, 10, 18),
    )


def two_publications(rid: int) -> list[dict[str, object]]:
    return [
        {"channel": "task_user:t1/u1", "projection": "USER_SUMMARY", "data": {"kind": "s", "n": rid}},
        {
            "channel": f"task_detail:t1/task-{rid}",
            "projection": "TASK_DETAIL",
            "data": {"kind": "d", "n": rid},
        },
    ]


def replies(*items: dict[str, object]) -> httpx.Response:
    return httpx.Response(200, json={"replies": list(items)})


OK = {"publish": {"offset": 1, "epoch": "e"}}


async def test_a_version_row_is_one_publish_command_per_publication(publisher: Make) -> None:
    """Each publication of a VERSION row is the command a row of its projection was: its channel,
    its data, ``{task}:{version}:{channel}`` as the idempotency key, the row's tags (notice:
    never conflated); a legacy row in the same claim goes in the same request."""
    commands: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/batch"
        commands.extend(c["publish"] for c in json.loads(request.content)["commands"])
        return replies(OK, OK, OK)

    pub, seen = publisher(handler)
    results = await pub.publish([version_row(1, two_publications(1), priority=10), row(2)])
    assert results == [PUBLISHED, PUBLISHED] and len(seen) == 1
    assert [(c["channel"], c["data"], c["idempotency_key"]) for c in commands] == [
        ("task_user:t1/u1", {"kind": "s", "n": 1}, "task-1:3:task_user:t1/u1"),
        ("task_detail:t1/task-1", {"kind": "d", "n": 1}, "task-1:3:task_detail:t1/task-1"),
        ("task_user:t1/u1", {"n": 2}, "task-2:1:task_user:t1/u1"),
    ]
    committed = str(committed_at_ms(datetime(2026, 9, 21, 7, 10, 18)))
    for c in commands[:2]:
        tags = c["tags"]
        assert isinstance(tags, dict) and int(tags.pop(PUBLISHED_AT_TAG)) > 0
        assert tags == {"task": "task-1", "conflate": "never", COMMITTED_AT_TAG: committed}
    await pub.aclose()


async def test_a_version_rows_results_merge_retry_first_then_dead(publisher: Make) -> None:
    """One publication temporarily refused → the row is retried, and the next attempt re-sends
    both; one refused for good → the row is DEAD with that publication's error."""
    sent: list[list[str]] = []
    script = [
        replies(OK, {"error": {"code": 100, "message": "internal"}}),
        replies(OK, OK),
        replies({"error": {"code": 102, "message": "unknown channel"}}, OK),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append([c["publish"]["channel"] for c in json.loads(request.content)["commands"]])
        return script.pop(0)

    pub, _ = publisher(handler)
    [retry] = await pub.publish([version_row(1, two_publications(1))])
    assert (retry.outcome, retry.failure_class) == (Outcome.RETRY, "api_100")
    assert await pub.publish([version_row(1, two_publications(1))]) == [PUBLISHED]
    assert sent[0] == sent[1] == ["task_user:t1/u1", "task_detail:t1/task-1"]  # both re-sent
    [dead] = await pub.publish([version_row(1, two_publications(1))])
    assert (dead.outcome, dead.failure_class) == (Outcome.DEAD, "api_102")
    assert "unknown channel" in dead.error
    await pub.aclose()


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[]",
        '{"channel": "task_user:t1/u1"}',
        '[{"channel": "task_user:t1/u1", "projection": "USER_SUMMARY"}]',
        '[{"channel": 7, "projection": "USER_SUMMARY", "data": {}}]',
        "[1]",
    ],
)
async def test_a_malformed_version_payload_is_dead_alone(publisher: Make, payload: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return replies(*[OK] * len(json.loads(request.content)["commands"]))

    pub, seen = publisher(handler)
    results = await pub.publish([row(1), version_row(2, payload), version_row(3, two_publications(3))])
    assert [r.outcome for r in results] == [Outcome.PUBLISHED, Outcome.DEAD, Outcome.PUBLISHED]
    assert results[1].failure_class == "malformed" and "VERSION payload" in results[1].error
    assert len(seen) == 1 and len(json.loads(seen[0].content)["commands"]) == 3
    await pub.aclose()


async def test_a_claim_with_more_commands_than_a_batch_takes_is_split(
    publisher: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher_module, "MAX_BATCH_COMMANDS", 3)
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["commands"])
        sizes.append(n)
        return replies(*[OK] * n)

    pub, _ = publisher(handler)
    rows = [version_row(i, two_publications(i)) for i in range(1, 4)]
    assert await pub.publish(rows) == [PUBLISHED] * 3
    assert sizes == [3, 3]
    await pub.aclose()
