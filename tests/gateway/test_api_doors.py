"""Every front door of the server API parses into the same typed request and runs it through the
one executor (gateway/api/executor.py), so the same request gets the same answer through each:
HTTP ``/api/<method>``, one command of ``/api/batch``, one line of the legacy ``/api``, gRPC's
method and one command of gRPC's ``Batch``. In-process: a real Node on the memory engine per
door (the same deterministic epoch), the HTTP adapter fed request bytes, and a real grpc.aio
server on a loopback port called with grpcio's own stub. Each door runs the same sequence of
edge cases (idempotency and version suppression depend on what ran before); the answers are
compared as the gRPC response messages they convert to, and the metrics they leave behind are
compared too. Plus the typed parser itself: a request read from a protobuf message
(``MessageParams``) is the request read from the same JSON params."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import orjson
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from gateway.api.commands import METHODS, Refused, command
from gateway.api.executor import ServerApi
from gateway.api.grpc import api_pb2 as pb
from gateway.api.grpc import api_pb2_grpc
from gateway.api.grpc.server import MessageParams, Servicer, fill, register
from gateway.api.http import ApiEndpoint
from gateway.api.requests import MAX_TAGS, MAX_WHITELIST
from gateway.engine.memory import MemoryBroker
from gateway.protocol.policy import MAX_EXPIRE_AT
from httpwire.inline import Deferred
from tests.gateway.recording import INSECURE, Harness

ENV = {
    **INSECURE,
    "TASKCAST_HTTP_API_INSECURE": "true",
    "TASKCAST_CHANNEL_NAMESPACES": '[{"name": "nohist"}, {"name": "pres", "presence": true}]',
}
HEADERS = [(b"host", b"gw")]

SERVICE = pb.DESCRIPTOR.services_by_name["CentrifugoApi"]
GRPC: dict[str, tuple[str, type[Message], type[Message]]] = {}
"""API method -> (gRPC method, request type, response type)."""
for _m in SERVICE.methods:
    if _m.name != "Batch":
        _api = {"PresenceStats": "presence_stats", "HistoryRemove": "history_remove", "RPC": "rpc"}.get(
            _m.name,
            re.sub(r"(?<!^)(?=[A-Z])", "_", _m.name).lower(),  # MapReadState: map_read_state
        )
        GRPC[_api] = (_m.name, getattr(pb, _m.input_type.name), getattr(pb, _m.output_type.name))

CASES: list[tuple[str, dict[str, Any]]] = [
    ("publish", {"channel": "a", "data": {"n": 1}}),
    ("publish", {"channel": "a", "data": {"n": 2}, "tags": {"t": "x"}, "idempotency_key": "k"}),
    ("publish", {"channel": "a", "data": {"n": 2}, "idempotency_key": "k"}),  # suppressed
    ("publish", {"channel": "a", "data": 3, "skip_history": True}),
    ("publish", {"channel": "a", "b64data": "eyJuIjo0fQ==", "data": "ignored"}),  # b64data wins
    ("publish", {"channel": "a", "b64data": "not base64!"}),  # 107
    ("publish", {"channel": "a", "data": 5, "version": 3}),
    ("publish", {"channel": "a", "data": 6, "version": 2}),  # suppressed by version
    ("publish", {"channel": "a", "data": 7, "version": 9, "version_epoch": "v", "delta": True}),
    ("publish", {"channel": "nohist:b", "data": 7}),  # no history: empty result
    ("publish", {"channel": "undefined:x", "data": 1}),  # 102
    ("publish", {"channel": "", "data": 1}),  # 107
    ("publish", {"data": 1}),  # 107
    ("publish", {"channel": "a"}),  # 107: data or b64data
    ("publish", {"channel": "a", "data": ""}),
    ("publish", {"channel": "a", "data": 1, "tags": {str(i): "v" for i in range(MAX_TAGS + 1)}}),  # 107
    ("broadcast", {"channels": ["a", "undefined:y", "nohist:b", ""], "data": {"b": 1}}),
    ("broadcast", {"channels": [], "data": 1}),  # 107
    ("broadcast", {"channels": ["a"], "b64data": "%%"}),  # 107
    ("history", {"channel": "a", "limit": -1}),
    ("history", {"channel": "a", "limit": 2, "reverse": True}),
    ("history", {"channel": "a", "since": {"offset": 1, "epoch": "EPOCH"}, "limit": -1}),
    ("history", {"channel": "a", "since": {"offset": 1, "epoch": "other"}}),  # 112
    ("history", {"channel": "a", "since": {"epoch": "EPOCH"}, "reverse": True}),  # 107
    ("history", {"channel": "nohist:b"}),  # 108
    ("history", {"channel": "undefined:z"}),  # 102
    ("history", {}),  # 107
    ("presence", {"channel": "a"}),  # 108
    ("presence", {"channel": "pres:p"}),
    ("presence_stats", {"channel": "pres:p"}),
    ("subscribe", {"user": "u", "channel": "a"}),
    ("subscribe", {"user": "u", "channel": "undefined:x"}),  # 102
    ("subscribe", {"user": "u", "channel": "a", "b64info": "!!"}),  # 107
    ("subscribe", {"user": "u", "channel": "a", "expire_at": MAX_EXPIRE_AT + 1}),  # 107
    ("subscribe", {"user": "u", "channel": "a", "recover_since": {"offset": 2}, "info": {"i": 1}}),
    ("unsubscribe", {"user": "u", "channel": "a"}),
    ("unsubscribe", {"user": "u"}),  # 107
    ("disconnect", {"user": "u", "disconnect": {"code": 1000, "reason": "x"}}),  # 107: no close code
    ("disconnect", {"user": "u", "disconnect": {"code": 5000}}),  # 107: out of range
    ("disconnect", {"user": "u", "whitelist": [str(i) for i in range(MAX_WHITELIST + 1)]}),  # 107
    ("disconnect", {"user": "u", "disconnect": {"code": 4000, "reason": "bye"}}),
    ("refresh", {"user": "u", "expired": True}),
    ("refresh", {"user": "u", "expire_at": MAX_EXPIRE_AT + 1}),  # 107
    ("rpc", {"method": "m", "params": {"p": 1}}),  # 104
    ("history_remove", {"channel": "nohist:b"}),  # 108
    ("history_remove", {"channel": "a"}),
    ("history", {"channel": "a", "limit": -1}),  # removed, the top kept
]

Outcome = tuple[str, object]


def canonical(method: str, answer: dict[str, Any]) -> Outcome:
    """A JSON door's answer (``{"result"}``, ``{"<method>"}`` or ``{"error"}``) as the gRPC
    response message it converts to (the conversion the gRPC door uses)."""
    if "error" in answer:
        return "error", (answer["error"]["code"], answer["error"]["message"])
    result = answer["result"] if "result" in answer else answer[method]
    response = fill(GRPC[method][2](), {"result": orjson.loads(orjson.dumps(result))})
    return "result", json_format.MessageToDict(response.result, preserving_proto_field_name=True)  # type: ignore[attr-defined]


def grpc_outcome(reply: Any, field: str) -> Outcome:
    if reply.HasField("error"):
        return "error", (reply.error.code, reply.error.message)
    return "result", json_format.MessageToDict(getattr(reply, field), preserving_proto_field_name=True)


def request_message(method: str, params: dict[str, Any]) -> Message:
    return fill(GRPC[method][1](), params)


def api_metrics(h: Harness) -> list[str]:
    """The API's error counters and duration counts, the protocol label left out."""
    text = h.node.metrics.render().decode().replace('protocol="grpc"', 'protocol="-"')
    return sorted(
        line.replace('protocol="http"', 'protocol="-"')
        for line in text.splitlines()
        if ("api_command" in line or "api_errors" in line or "action_count" in line)
        and not line.startswith("#")
        and not any(part in line for part in ("_sum", "_bucket", "_created"))
    )


Door = Callable[[str, dict[str, Any]], Awaitable[Outcome]]


async def _drive(response: Any) -> tuple[int, Any]:
    if isinstance(response, Deferred):
        response = await response.coro
    status, body, _ = response
    assert status == 200, (status, body)
    return status, body


class Doors:
    """One gateway per door; each door answers one command."""

    def __init__(
        self,
        stub: api_pb2_grpc.CentrifugoApiStub,
        batch_stub: api_pb2_grpc.CentrifugoApiStub,
        grpc_harnesses: dict[str, Harness],
    ) -> None:
        self.stub = stub
        self.batch_stub = batch_stub
        self.grpc_harnesses = grpc_harnesses
        self.harnesses: dict[str, Harness] = dict(grpc_harnesses)
        self.endpoints: dict[str, ApiEndpoint] = {}
        for door in ("http", "http batch", "legacy"):
            h = self.harnesses[door] = gateway()
            self.endpoints[door] = ApiEndpoint(ServerApi(h.node, h.settings), h.settings.http_api)

    async def http(self, method: str, params: dict[str, Any]) -> Outcome:
        response = self.endpoints["http"].respond_inline(method, "POST", HEADERS, b"", orjson.dumps(params))
        return canonical(method, orjson.loads((await _drive(response))[1]))

    async def http_batch(self, method: str, params: dict[str, Any]) -> Outcome:
        body = orjson.dumps({"commands": [{method: params}]})
        response = self.endpoints["http batch"].respond_inline("batch", "POST", HEADERS, b"", body)
        (reply,) = orjson.loads((await _drive(response))[1])["replies"]
        return canonical(method, reply)

    async def legacy(self, method: str, params: dict[str, Any]) -> Outcome:
        body = orjson.dumps({"method": method, "params": params})
        response = self.endpoints["legacy"].respond_inline("", "POST", HEADERS, b"", body)
        return canonical(method, orjson.loads((await _drive(response))[1]))

    async def grpc(self, method: str, params: dict[str, Any]) -> Outcome:
        reply = await getattr(self.stub, GRPC[method][0])(request_message(method, params))
        return grpc_outcome(reply, "result")

    async def grpc_batch(self, method: str, params: dict[str, Any]) -> Outcome:
        batch = pb.BatchRequest(commands=[pb.Command(**{method: request_message(method, params)})])
        response = await self.batch_stub.Batch(batch)
        (reply,) = response.replies
        return grpc_outcome(reply, method)


def gateway() -> Harness:
    return Harness(ENV, broker=MemoryBroker(epoch_factory=lambda: "EPOCH"))


@pytest.fixture
async def doors() -> AsyncIterator[Doors]:
    harnesses = {"grpc": gateway(), "grpc batch": gateway()}
    stubs: list[api_pb2_grpc.CentrifugoApiStub] = []
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []
    try:
        for h in harnesses.values():
            server = grpc.aio.server()
            servers.append(server)
            api = ServerApi(h.node, h.settings)
            register(Servicer(api, h.settings.grpc_api), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
            stubs.append(api_pb2_grpc.CentrifugoApiStub(channels[-1]))
        yield Doors(*stubs, harnesses)
    finally:
        for channel in channels:
            await channel.close()
        for server in servers:
            await server.stop(None)


async def test_every_door_gives_the_same_answer_to_the_same_request(doors: Doors) -> None:
    answers: dict[str, list[Outcome]] = {}
    for door in ("http", "http batch", "legacy", "grpc", "grpc batch"):
        run: Callable[[str, dict[str, Any]], Awaitable[Outcome]] = getattr(doors, door.replace(" ", "_"))
        answers[door] = [await run(method, params) for method, params in CASES]
    reference = answers["http"]
    assert [kind for kind, _ in reference].count("error") >= 20  # the edge cases are refusals
    for door, got in answers.items():
        for case, (want, have) in enumerate(zip(reference, got, strict=True)):
            assert have == want, (door, CASES[case], have, want)
    metrics = {door: api_metrics(h) for door, h in doors.harnesses.items()}
    for door, lines in metrics.items():
        assert lines == metrics["http"], door


async def test_a_malformed_batch_command_is_answered_in_place_by_both_batch_doors(doors: Doors) -> None:
    """A command that names no method or two is refused alone (107 ``commands[]``), and so is a
    gRPC command whose raw-JSON ``data`` is not JSON (107, as a command with bad params): the
    commands around it run, as in a JSON batch."""
    publish = {"channel": "a", "data": 1}
    endpoint = doors.endpoints["http batch"]
    body = orjson.dumps(
        {"commands": [{"publish": publish, "history": {"channel": "a"}}, {}, {"publish": publish}]}
    )
    json_replies = orjson.loads(
        (await _drive(endpoint.respond_inline("batch", "POST", HEADERS, b"", body)))[1]
    )
    message = request_message("publish", publish)
    commands = [
        pb.Command(publish=message, history=pb.HistoryRequest(channel="a")),
        pb.Command(),
        pb.Command(publish=pb.PublishRequest(channel="a", data=b"{not json")),
        pb.Command(publish=message),
    ]
    response = await doors.batch_stub.Batch(pb.BatchRequest(commands=commands))
    grpc_replies = [grpc_outcome(reply, "publish") for reply in response.replies]
    assert json_replies["replies"][:2] == [{"error": {"code": 107, "message": "bad request"}}] * 2
    assert grpc_replies[:3] == [("error", (107, "bad request"))] * 3
    assert (
        canonical("publish", json_replies["replies"][2])
        == grpc_replies[3]
        == ("result", {"offset": "1", "epoch": "EPOCH"})
    )


async def test_a_grpc_request_refused_by_the_parser_is_counted_as_an_http_one(doors: Doors) -> None:
    reply = await doors.stub.Publish(pb.PublishRequest(channel="a", data=b"{not json"))
    assert reply.error.code == 107
    metrics = doors.grpc_harnesses["grpc"].node.metrics
    assert metrics.api_errors.labels("grpc", "publish", "107")._value.get() == 1


json_values = st.recursive(
    st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
publish_params = st.fixed_dictionaries(
    {},
    optional={
        "channel": st.sampled_from(["", "c", "ns:c"]),
        "data": json_values,
        "b64data": st.sampled_from(["", "eyJ9", "bad!"]),
        "skip_history": st.booleans(),
        "tags": st.dictionaries(st.text(max_size=2), st.text(max_size=2), min_size=1, max_size=3),
        "idempotency_key": st.text(max_size=3),
        "version": st.integers(0, 2**64 - 1),
        "version_epoch": st.text(max_size=3),
        "delta": st.booleans(),
    },
)


def zero_is_absent(params: dict[str, Any]) -> dict[str, Any]:
    """The JSON params a protobuf message can say: proto3 has no present zero value."""
    return {k: v for k, v in params.items() if v not in ("", 0, False) or k == "data"}


@given(publish_params)
def test_a_request_from_a_protobuf_message_is_the_request_from_its_json(params: dict[str, Any]) -> None:
    from_json = command("publish", zero_is_absent(params))
    from_message = command("publish", MessageParams(request_message("publish", params)))
    if isinstance(from_json, Refused):
        assert isinstance(from_message, Refused)
        assert (from_message.method, from_message.error.code) == (from_json.method, from_json.error.code)
    else:
        assert from_message == from_json


def test_every_method_has_a_grpc_method_and_a_typed_request() -> None:
    assert sorted(GRPC) == sorted(METHODS)
