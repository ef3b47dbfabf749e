"""One webhook's delivery (gateway/webhooks/delivery.py) and the lifecycle hooks on the memory
engine (gateway/webhooks/lifecycle.py), in process, against the real HTTP receiver: redirects
are refused and never followed, refusals drop the batch, a held request times out and is
retried, no secret reaches a log line; hook calls become signed batches, occupancy decided
locally with its grace."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.app import Runtime
from gateway.config.loading import load_settings
from gateway.config.schema import ChannelSettings, Settings
from gateway.config.sections.webhooks import OccupancySettings, WebhookSettings
from gateway.engine.base import EngineError
from gateway.protocol import codes
from gateway.protocol.messages import ClientInfo
from gateway.webhooks.delivery import WebhookSender
from gateway.webhooks.lifecycle import Webhooks
from gateway.webhooks.metrics import WebhookMetrics
from gateway.webhooks.store import MemoryOccupancy
from tests.gateway.recording import INSECURE, RecordingTransport
from tests.gateway.webhooks.receiver import Receiver, serving
from tests.support import scaled, wait_until

SECRET = "delivery-secret-do-not-log-0123456789"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with serving(SECRET) as recv:
        yield recv


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@asynccontextmanager
async def sender(
    receiver: Receiver, path: str, **options: object
) -> AsyncIterator[tuple[WebhookSender, CollectorRegistry]]:
    registry = CollectorRegistry()
    settings = WebhookSettings(
        name=path.strip("/"),
        url=f"{receiver.url}{path}",
        secret=SECRET,
        retry_min_backoff=0.02,
        retry_max_backoff=0.05,
        **options,  # type: ignore[arg-type]
    )
    async with httpx.AsyncClient() as http:
        out = WebhookSender(settings, http, WebhookMetrics(registry))
        task = asyncio.create_task(out.run())
        try:
            yield out, registry
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_redirect_is_refused_never_followed_and_the_batch_dropped(receiver, caplog) -> None:
    receiver.set_mode("/moved", "redirect")
    caplog.set_level(logging.DEBUG)
    async with sender(receiver, "/moved") as (out, registry):
        out.offer(b'{"id":"r1"}')
        await wait_until(
            lambda: value(registry, "taskcast_gateway_webhook_events_dropped_total", webhook="moved") == 1
        )
        assert (
            value(registry, "taskcast_gateway_webhook_requests_total", webhook="moved", result="refused") == 1
        )
    assert not [r for r in receiver.requests if r.path == "/redirected"]
    assert "redirect" in caplog.text and SECRET not in caplog.text


async def test_a_refusal_drops_the_batch_and_the_next_one_goes_out(receiver) -> None:
    receiver.set_mode("/refusing", "refuse")
    async with sender(receiver, "/refusing") as (out, registry):
        out.offer(b'{"id":"x1"}')
        await wait_until(
            lambda: value(registry, "taskcast_gateway_webhook_events_dropped_total", webhook="refusing") == 1
        )
        receiver.set_mode("/refusing", "ok")
        out.offer(b'{"id":"x2"}')
        await wait_until(lambda: receiver.events("/refusing", id="x2"))
        assert value(registry, "taskcast_gateway_webhook_events_sent_total", webhook="refusing") == 1


async def test_a_held_request_times_out_and_is_retried_until_delivered(receiver, caplog) -> None:
    receiver.set_mode("/slow", "hang")
    async with sender(receiver, "/slow", timeout=0.2) as (out, registry):
        out.offer(b'{"id":"s1"}')
        await wait_until(
            lambda: (
                value(registry, "taskcast_gateway_webhook_requests_total", webhook="slow", result="retry")
                >= 2
            )
        )
        receiver.set_mode("/slow", "ok")
        await wait_until(
            lambda: value(registry, "taskcast_gateway_webhook_events_sent_total", webhook="slow") == 1
        )
    assert all(r.verified for r in receiver.requests if r.path == "/slow")  # re-signed each attempt
    assert SECRET not in caplog.text


async def test_hooks_on_the_memory_engine_become_events_and_local_occupancy(receiver) -> None:
    settings = Settings(
        channel=ChannelSettings(),
        webhooks=(WebhookSettings(name="mem", url=f"{receiver.url}/mem", secret=SECRET),),
        occupancy=OccupancySettings(vacated_grace=0.05, node_ttl=0.3, sweep_interval=0.02),
    )
    hooks = Webhooks(
        settings,
        node="node-1",
        metrics=WebhookMetrics(CollectorRegistry()),
        occupancy=MemoryOccupancy(0.05, 0.3),
        http=httpx.AsyncClient(),
    )
    task = asyncio.create_task(hooks.run())
    info = ClientInfo("u", "c1", b'{"name":"Ann"}')
    hooks.connected(info, "websocket")
    hooks.occupied_here("ch")
    hooks.subscribed("ch", info, presence=True)
    await wait_until(lambda: receiver.events("/mem", type="channel_occupied", channel="ch"))
    hooks.unsubscribed("ch", info, presence=True)
    hooks.vacated_here("ch")
    hooks.disconnected(info, codes.DISCONNECT_SHUTDOWN)
    await wait_until(lambda: receiver.events("/mem", type="channel_vacated", channel="ch"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await hooks.close()
    types = [
        e["type"] for e in receiver.events("/mem") if e["type"] not in ("channel_occupied", "channel_vacated")
    ]
    assert types == ["connect", "subscribe", "presence_join", "presence_leave", "unsubscribe", "disconnect"]
    connect = receiver.events("/mem", type="connect")[0]
    assert connect["info"] == {"name": "Ann"} and connect["node"] == "node-1"
    assert receiver.events("/mem", type="disconnect")[0]["code"] == 3001


class SwallowingStore:
    """An ``OccupancyStore`` whose client turns a cancellation into its own error (as a timeout
    racing the cancel, or a Redis client, can)."""

    def __init__(self) -> None:
        self.calls = 0

    async def update(self, node: str, changes: object, *, reset: bool = False) -> None:
        self.calls += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise EngineError("connection lost") from None

    async def retire(self, node: str) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_a_cancelled_loop_stops_even_when_the_cancellation_comes_back_as_an_error(receiver) -> None:
    store = SwallowingStore()
    settings = Settings(
        webhooks=(WebhookSettings(name="mem", url=f"{receiver.url}/mem", secret=SECRET),),
        occupancy=OccupancySettings(sweep_interval=0.01, node_ttl=1.0),
    )
    hooks = Webhooks(
        settings,
        node="n",
        metrics=WebhookMetrics(CollectorRegistry()),
        occupancy=store,
        http=httpx.AsyncClient(),
    )
    task = asyncio.create_task(hooks.run())
    await wait_until(lambda: store.calls == 1)
    task.cancel()
    await wait_until(task.done, within=5.0, what="the cancelled loops to stop")
    assert task.cancelled() and store.calls == 1
    await hooks.close()


async def test_a_gateway_on_the_memory_engine_reports_its_clients_lifecycle(receiver) -> None:
    hooks = [{"name": "gw", "url": f"{receiver.url}/gw", "secret": SECRET}]
    env = {
        **INSECURE,
        "CENTRIFUGO_CHANNEL_WITHOUT_NAMESPACE_PRESENCE": "true",
        "CENTRIFUGO_WEBHOOKS": json.dumps(hooks),
        "CENTRIFUGO_OCCUPANCY_VACATED_GRACE": "50ms",
        "CENTRIFUGO_OCCUPANCY_SWEEP_INTERVAL": "20ms",
    }
    settings, _ = load_settings(None, env)
    rt = Runtime(settings)
    assert rt.webhooks is not None
    task = asyncio.create_task(rt.webhooks.run())
    try:
        one = rt.clients.connect(RecordingTransport())
        two = rt.clients.connect(RecordingTransport("sse"))
        for client in (one, two):
            client.feed(b'{"id":1,"connect":{}}\n{"id":2,"subscribe":{"channel":"room"}}')
        await wait_until(lambda: len(receiver.events("/gw", type="presence_join")) == 2)
        one.connection_lost()  # the peer went away
        two.disconnect(codes.DISCONNECT_SHUTDOWN)
        await wait_until(lambda: receiver.events("/gw", type="channel_vacated", channel="room"))
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await rt.close()
    events = receiver.events("/gw")
    assert [e["type"] for e in events].count("channel_occupied") == 1
    gone = {e["client"]: e["code"] for e in events if e["type"] == "disconnect"}
    assert gone == {one.client_id: 3000, two.client_id: 3001}
    assert {e["transport"] for e in events if e["type"] == "connect"} == {"websocket", "sse"}
    assert len([e for e in events if e["type"] == "unsubscribe"]) == 2
    assert all(r.verified for r in receiver.requests if r.path == "/gw")


async def test_flush_at_shutdown_delivers_what_it_can_within_one_timeout(receiver) -> None:
    registry = CollectorRegistry()
    async with httpx.AsyncClient() as http:
        # One timeout covers the whole flush: three round trips to the receiver must fit in it
        # on a loaded machine (0.3 s did not), and the held batch below waits it out.
        settings = WebhookSettings(
            name="flush", url=f"{receiver.url}/flush", secret=SECRET, timeout=scaled(2.0), max_batch_size=2
        )
        out = WebhookSender(settings, http, WebhookMetrics(registry))
        for n in range(5):
            out.offer(orjson.dumps({"id": f"f{n}"}))
        await out.flush()  # the receiver answers: three batches
        assert sorted(e["id"] for e in receiver.events("/flush")) == ["f0", "f1", "f2", "f3", "f4"]
        receiver.set_mode("/flush", "hang")
        for n in range(5, 10):
            out.offer(orjson.dumps({"id": f"f{n}"}))
        await asyncio.wait_for(out.flush(), timeout=scaled(5))  # bounded: the receiver holds it
        receiver.set_mode("/flush", "ok")
    assert out.queued == 0
    assert value(registry, "taskcast_gateway_webhook_events_sent_total", webhook="flush") == 5
    assert value(registry, "taskcast_gateway_webhook_events_dropped_total", webhook="flush") == 5
