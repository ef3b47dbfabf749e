"""The memory engine shared by ``--workers N``: its wire codec (pure) and the worker link's
behaviour when the broker goes away and comes back (real Unix socket, in-process server).
The Broker/PresenceManager contract itself runs in tests/contracts (param "shared")."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.engine import shared_wire as wire
from gateway.engine.base import EngineError, HistoryOptions, HistoryResult, PresenceStats, PublishResult
from gateway.engine.shared_memory import SharedMemoryBroker
from gateway.engine.shared_server import BrokerServer
from gateway.protocol.messages import ClientInfo, Publication, StreamPosition
from tests.support import wait_until

INFO = ClientInfo(user="u", client="c", conn_info=b'{"a":1}', chan_info=None)
PUB = Publication(data=b'{"x":1}', offset=7, info=INFO, tags={"task": "t1"}, time=123)
HISTORY = HistoryOptions(size=10, ttl_seconds=60)


@pytest.mark.parametrize(
    "value",
    [
        PUB,
        StreamPosition(3, "abcdefgh"),
        HISTORY,
        PublishResult(StreamPosition(1, "e"), suppressed=True),
        PublishResult(None),
        HistoryResult([PUB, Publication(data=b"{}")], StreamPosition(9, "e")),
        PresenceStats(num_clients=2, num_users=1),
        {"c1": INFO},
        10**30,
        -(10**30),
        None,
    ],
)
def test_engine_values_round_trip_as_their_own_types(value: object) -> None:
    frame = wire.encode(["r", 1, value])
    body = frame[wire.HEADER_BYTES :]
    assert wire.body_length(frame[: wire.HEADER_BYTES]) == len(body)
    assert wire.decode(body) == ["r", 1, value]


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # never used in msgpack
        b"\x90",  # an empty list
        b"\xa1x",  # not a list
        b"\x91\xd4\x63\x00",  # ext type 99: not one of ours
        b"\x91\xd5\x03\x91\x01",  # a Publication with one field
    ],
)
def test_foreign_frames_are_wire_errors(body: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(body)


def test_an_oversized_frame_header_is_refused() -> None:
    with pytest.raises(wire.WireError):
        wire.body_length((wire.MAX_FRAME_BYTES + 1).to_bytes(wire.HEADER_BYTES, "big"))


def test_other_types_are_not_sent() -> None:
    with pytest.raises(TypeError):
        wire.encode([object()])


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tc-shared-"))  # short: sun_path holds 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Handler:
    def __init__(self) -> None:
        self.pubs: list[tuple[str, int]] = []
        self.reconnects = 0

    def on_publication(
        self, channel: str, pub: Publication, position: StreamPosition | None, write_now: bool = False
    ) -> None:
        self.pubs.append((channel, pub.offset))

    def on_join(self, channel: str, info: ClientInfo) -> None: ...

    def on_leave(self, channel: str, info: ClientInfo) -> None: ...

    def on_control(self, data: bytes) -> None: ...

    def on_broker_reconnect(self) -> None:
        self.reconnects += 1


async def test_a_lost_broker_fails_calls_then_the_link_resubscribes_and_reports_a_reconnect(
    socket_dir: Path,
) -> None:
    path = socket_dir / "engine.sock"
    handler = Handler()
    broker = SharedMemoryBroker(path)
    broker.set_handler(handler)
    async with asyncio.TaskGroup() as tg:
        link = tg.create_task(broker.run())
        first = BrokerServer(path, presence_ttl_seconds=60)
        serving = tg.create_task(first.run())
        await wait_until(broker.healthy, 10, "link up")
        await broker.subscribe("ch")
        await broker.publish("ch", Publication(data=b"{}"), HISTORY)
        await wait_until(lambda: handler.pubs == [("ch", 1)], 10, "first delivery")

        serving.cancel()
        await wait_until(lambda: not broker.healthy(), 10, "link down")
        with pytest.raises(EngineError):
            await broker.history("ch", HISTORY)

        second = BrokerServer(path, presence_ttl_seconds=60)  # a restarted broker: empty, new epoch
        serving = tg.create_task(second.run())
        await wait_until(lambda: broker.healthy() and handler.reconnects == 1, 10, "reconnect reported")
        # Re-subscribed on its own: a publish on the new broker is delivered.
        await broker.publish("ch", Publication(data=b"{}"), HISTORY)
        await wait_until(lambda: handler.pubs == [("ch", 1), ("ch", 1)], 10, "delivery after reconnect")
        await broker.close()
        link.cancel()
        serving.cancel()
