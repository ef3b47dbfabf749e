"""On the memory engine a publish (and a sequential batch of publishes) completes without
suspending, so the HTTP protocol drives it outside any task (``ServerApi.completes_inline``,
httpwire/inline.py), and it answers exactly what the same executor answers on an engine that
is not inline. In-process: request bytes in, response bytes out, against a reference gateway
whose broker is not inline (every publish then awaits the engine's coroutine), with the same
settings and epochs. Replies, HTTP statuses, error codes, metrics and deliveries are compared."""

from __future__ import annotations

import orjson
import pytest

from gateway.api.executor import ServerApi
from gateway.api.http import ApiEndpoint
from gateway.engine.memory import MemoryBroker
from httpwire.inline import Deferred, Response
from tests.gateway.recording import INSECURE, Harness

KEY = b"fast-key"
ENV = {
    **INSECURE,
    "TASKCAST_HTTP_API_KEY": KEY.decode(),
    "TASKCAST_CHANNEL_NAMESPACES": '[{"name": "nohist"}]',
}
HEADERS = [(b"host", b"gw"), (b"x-api-key", KEY)]


class ReferenceBroker(MemoryBroker):
    """The memory engine taken through the general (coroutine) path."""

    publishes_inline = False


def gateway(broker: MemoryBroker) -> tuple[Harness, ApiEndpoint]:
    h = Harness(ENV, broker=broker)
    return h, ApiEndpoint(ServerApi(h.node, h.settings), h.settings.http_api)


def pair() -> tuple[tuple[Harness, ApiEndpoint], tuple[Harness, ApiEndpoint]]:
    fast = gateway(MemoryBroker(epoch_factory=lambda: "EPOCH"))
    reference = gateway(ReferenceBroker(epoch_factory=lambda: "EPOCH"))
    assert fast[0].node.publishes_inline and not reference[0].node.publishes_inline
    return fast, reference


def completed_inline(response: Response | Deferred) -> Response | None:
    """The response, when it is ready or its coroutine completes at its first step (as the HTTP
    protocol drives a ``Deferred`` marked inline); None when it is not marked inline."""
    if not isinstance(response, Deferred):
        return response
    if not response.inline:
        return None
    try:
        response.coro.send(None)
    except StopIteration as stop:
        done: Response = stop.value
        return done
    raise AssertionError("marked inline, but suspended")


async def answer(
    endpoint: ApiEndpoint, method: str, body: bytes, headers: list[tuple[bytes, bytes]] = HEADERS
) -> tuple[int, object, bytes | None, bool]:
    """(status, parsed body, content type, completed without suspending: outside any task)."""
    deferred = endpoint.respond_inline(method, "POST", headers, b"", body)
    response = completed_inline(deferred)
    ready = response is not None
    if response is None:
        assert isinstance(deferred, Deferred)
        response = await deferred.coro
    status, data, ctype = response
    return status, orjson.loads(data) if ctype == b"application/json" else data or None, ctype, ready


def api_metrics(h: Harness) -> list[str]:
    """The API's error counters, duration counts and action counters from /metrics (no
    timing-dependent sample: sums, buckets and creation times are left out)."""
    text = h.node.metrics.render().decode()
    return sorted(
        line
        for line in text.splitlines()
        if ("api_command" in line or "api_errors" in line or "action_count" in line)
        and not line.startswith("#")
        and not any(part in line for part in ("_sum", "_bucket", "_created"))
    )


PUBLISHES = [
    b'{"channel":"a","data":{"n":1}}',
    b'{"channel":"a","data":{"n":2},"tags":{"t":"x"},"idempotency_key":"k"}',
    b'{"channel":"a","data":{"n":2},"idempotency_key":"k"}',  # suppressed: the first result
    b'{"channel":"a","data":3,"skip_history":true}',
    b'{"channel":"a","b64data":"eyJuIjo0fQ=="}',
    b'{"channel":"a","b64data":"not base64!"}',  # 107
    b'{"channel":"a","data":5,"version":3}',
    b'{"channel":"a","data":6,"version":2}',  # suppressed by version
    b'{"channel":"nohist:b","data":7}',  # no history: empty result
    b'{"channel":"undefined:x","data":1}',  # 102
    b'{"channel":"","data":1}',  # 107
    b'{"data":1}',  # 107
    b'{"channel":"a"}',  # 107 data or b64data
    b'{"channel":5,"data":1}',  # 107
    b'{"channel":"a","data":1,"extra":true}',
    b"[1,2]",
    b"",
    b"not json",  # 400
]


@pytest.mark.parametrize("transport_mode", [False, True])
async def test_publish_answers_what_the_general_path_answers(transport_mode: bool) -> None:
    (fh, fast), (rh, reference) = pair()
    headers = HEADERS + ([(b"x-centrifugo-error-mode", b"transport")] if transport_mode else [])
    for body in PUBLISHES:
        got = await answer(fast, "publish", body, headers)
        want = await answer(reference, "publish", body, headers)
        assert got[:3] == want[:3], body
        assert got[3], body  # completed outside any task
    assert api_metrics(fh) == api_metrics(rh)


BATCHES = [
    {"commands": [{"publish": orjson.loads(body)} for body in PUBLISHES if body.startswith(b"{")]},
    {"commands": ["x", {}, {"publish": {"channel": "a", "data": 1}, "history": {}}, {"batch": {}}]},
    {"commands": [{"publish": {"channel": "a", "data": 1}}, {"nope": {}}]},  # 104 for the unknown
    {"commands": [{"publish": {"channel": "a", "data": 1}}, {"history": {"channel": "a", "limit": -1}}]},
    {"commands": [{"broadcast": {"channels": ["a", "undefined:y"], "data": 9}}]},
    {"commands": [{"publish": {"channel": "a", "data": 1}}], "parallel": True},
    {"commands": [], "parallel": False},
    {"commands": "x"},
    {"commands": [], "parallel": "yes"},
    {},
    [],
]


async def test_batch_answers_what_the_general_path_answers() -> None:
    (fh, fast), (rh, reference) = pair()
    for params in BATCHES:
        body = orjson.dumps(params)
        got = await answer(fast, "batch", body)
        want = await answer(reference, "batch", body)
        assert got[:3] == want[:3], params
    assert api_metrics(fh) == api_metrics(rh)


async def test_all_publish_batches_complete_outside_any_task() -> None:
    (_, fast), _ = pair()
    # Publishes, broadcasts and refused commands (a nested batch, an unknown method: nothing runs).
    taken = [*BATCHES[0:3], BATCHES[4], *BATCHES[6:]]
    taken.append({"commands": ["x", {}, {"publish": {"channel": "a", "data": 1}, "history": {}}]})
    for params in taken:
        assert (await answer(fast, "batch", orjson.dumps(params)))[3], params
    for params in [BATCHES[3], BATCHES[5]]:  # a history, or parallel
        assert not (await answer(fast, "batch", orjson.dumps(params)))[3], params


async def test_refusals_are_kept_on_the_fast_path() -> None:
    (_, fast), (_, reference) = pair()
    body = b'{"channel":"a","data":1}'
    for method in ("publish", "batch"):
        for headers in (
            [(b"host", b"gw")],
            [(b"x-api-key", b"wrong")],
            [(b"authorization", b"apikey wrong")],
            [(b"x-api-key", KEY + b"\xe9")],  # not ASCII: the decoded comparison
            [(b"x-api-key", KEY[:-1])],
        ):
            assert (await answer(fast, method, body, headers))[:2] == (401, None)
            assert (await answer(reference, method, body, headers))[:2] == (401, None)
        assert fast.respond_inline(method, "GET", HEADERS, b"", body) == (405, b"", None)
    assert (await answer(fast, "publish", body, [(b"authorization", b"apikey " + KEY)]))[0] == 200
    fast.max_body = 10
    assert fast.respond_inline("publish", "POST", HEADERS, b"", body)[0] == 413  # type: ignore[index]


async def test_a_fast_batch_delivers_every_publication_in_order() -> None:
    (fh, fast), _ = pair()
    _, first = await fh.subscribed("a")
    _, other = await fh.subscribed("nohist:b")
    commands = [{"publish": {"channel": ch, "data": {"n": n}}} for n, ch in enumerate(["a", "nohist:b", "a"])]
    status, replies, _, ready = await answer(fast, "batch", orjson.dumps({"commands": commands}))
    assert status == 200 and ready
    assert replies == {
        "replies": [
            {"publish": {"offset": 1, "epoch": "EPOCH"}},
            {"publish": {}},
            {"publish": {"offset": 2, "epoch": "EPOCH"}},
        ]
    }
    got_a = [(await first.push("pub"))["pub"] for _ in range(2)]
    got_b = (await other.push("pub"))["pub"]
    assert [(p["offset"], p["data"]) for p in got_a] == [(1, {"n": 0}), (2, {"n": 2})]
    assert got_b["data"] == {"n": 1} and "offset" not in got_b


def test_a_broker_subclass_that_overrides_publish_is_not_inline() -> None:
    class Overrides(MemoryBroker):
        async def publish(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            return await super().publish(*args, **kwargs)  # type: ignore[arg-type]

    assert MemoryBroker.publishes_inline and not Overrides.publishes_inline
    assert ReferenceBroker.publishes_inline is False


async def test_a_lone_publish_is_written_at_once_and_a_batch_after_its_tick() -> None:
    """A personal channel's publication from ``publish`` reaches the transport within the call
    (``PublishItem.write_now``, a parameter of the publish, not state of the hub); a batch's
    publications are written together after it, one write per
    connection (bursts keep the per-tick writes); a channel with two subscribers always waits
    for the tick."""
    (fh, fast), _ = pair()
    _, one = await fh.subscribed("p")
    _, two_a = await fh.subscribed("shared")
    _, two_b = await fh.subscribed("shared")
    for transport in (one, two_a, two_b):
        transport.clear()
    assert (await answer(fast, "publish", b'{"channel":"p","data":1}'))[0] == 200
    assert len(one.writes) == 1  # no loop turn in between
    assert (await answer(fast, "publish", b'{"channel":"shared","data":1}'))[0] == 200
    assert two_a.writes == [] and two_b.writes == []
    batch = {"commands": [{"publish": {"channel": "p", "data": n}} for n in (2, 3)]}
    assert (await answer(fast, "batch", orjson.dumps(batch)))[0] == 200
    assert len(one.writes) == 1 and not hasattr(fh.node.hub, "write_now")
    await one.push("pub")
    got = [(await one.push("pub"))["pub"]["data"] for _ in range(2)]
    assert got == [2, 3] and len(one.writes) == 2  # the batch's two in one write
    await two_a.push("pub")
    await two_b.push("pub")
