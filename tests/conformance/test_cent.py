"""cent 5.x (PyPI ``cent``, the official server-API client) against a real gateway process."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
import websockets
from cent import (
    BatchRequest,
    BroadcastRequest,
    CentApiResponseError,
    CentUnauthorizedError,
    ChannelsRequest,
    Client,
    DisconnectRequest,
    HistoryRemoveRequest,
    HistoryRequest,
    InfoRequest,
    PresenceRequest,
    PresenceStatsRequest,
    PublishRequest,
    RefreshRequest,
    StreamPosition,
    SubscribeRequest,
    UnsubscribeRequest,
)

from tests.conformance.conftest import SECRET
from tests.support import GatewayProcess, mint_token, scaled


def uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def cent(gateway: GatewayProcess) -> Iterator[Client]:
    client = Client(gateway.api_url, gateway.api_key, timeout=scaled(5.0))
    yield client
    client.close()


def test_cent_publish_history_and_idempotency(cent: Client):
    channel = f"cent-{uid()}"
    offsets = [cent.publish(PublishRequest(channel=channel, data={"n": n})).offset for n in range(1, 11)]
    assert offsets == list(range(1, 11))
    first = cent.publish(PublishRequest(channel=channel, data={"n": 11}, idempotency_key="k1"))
    again = cent.publish(PublishRequest(channel=channel, data={"n": 11}, idempotency_key="k1"))
    assert (first.offset, first.epoch) == (again.offset, again.epoch) == (11, first.epoch)

    history = cent.history(HistoryRequest(channel=channel, limit=3))
    # history_size is 10: offset 1 was trimmed by the 11th publication.
    assert [(p.data, p.offset) for p in history.publications] == [({"n": n}, n) for n in (2, 3, 4)]
    assert history.offset == 11 and history.epoch == first.epoch
    since = cent.history(
        HistoryRequest(channel=channel, limit=-1, since=StreamPosition(offset=8, epoch=first.epoch))
    )
    assert [p.offset for p in since.publications] == [9, 10, 11]
    reverse = cent.history(HistoryRequest(channel=channel, limit=2, reverse=True))
    assert [p.offset for p in reverse.publications] == [11, 10]
    with pytest.raises(CentApiResponseError) as exc:
        cent.history(HistoryRequest(channel=channel, limit=1, since=StreamPosition(offset=1, epoch="other")))
    assert exc.value.code == 112

    cent.history_remove(HistoryRemoveRequest(channel=channel))
    emptied = cent.history(HistoryRequest(channel=channel, limit=-1))
    assert emptied.publications == [] and emptied.offset == 11


def test_cent_broadcast(cent: Client):
    a, b = f"cent-{uid()}", f"cent-{uid()}"
    cent.publish(PublishRequest(channel=a, data={"n": 0}))
    result = cent.broadcast(BroadcastRequest(channels=[a, b], data={"n": 1}))
    assert [(r.result.offset, r.error) for r in result.responses] == [(2, None), (1, None)]


def test_cent_info_channels_presence_batch(cent: Client, gateway: GatewayProcess):
    info = cent.info(InfoRequest())
    assert len(info.nodes) == gateway.workers  # one node per worker of --workers N
    node = info.nodes[0]
    assert node.uid and node.name and node.version

    channel = f"cent-{uid()}"
    batch = cent.batch(
        BatchRequest(
            requests=[
                PublishRequest(channel=channel, data={"n": 1}),
                PresenceRequest(channel=channel),
                PresenceStatsRequest(channel=channel),
                HistoryRequest(channel=channel, limit=-1),
            ],
            parallel=False,
        )
    )
    publish, presence, stats, history = batch.replies
    assert publish.offset == 1
    assert presence.presence == {}
    assert (stats.num_clients, stats.num_users) == (0, 0)
    assert [p.offset for p in history.publications] == [1]

    assert cent.channels(ChannelsRequest(pattern="cent-nobody-*")).channels == {}


async def test_cent_with_a_live_connection(gateway: GatewayProcess):
    """presence, channels, unsubscribe, subscribe, refresh, disconnect against a real connection."""
    channel, other = f"cent-{uid()}", f"cent-{uid()}"
    api = Client(gateway.api_url, gateway.api_key, timeout=scaled(5.0))
    try:
        async with websockets.connect(gateway.ws_url) as ws:
            await ws.send(json.dumps({"id": 1, "connect": {"token": mint_token(SECRET, "42")}}))
            client_id = json.loads(await asyncio.wait_for(ws.recv(), scaled(5.0)))["connect"]["client"]
            await ws.send(json.dumps({"id": 2, "subscribe": {"channel": channel}}))
            reply = json.loads(await asyncio.wait_for(ws.recv(), scaled(5.0)))
            assert reply["id"] == 2 and reply["subscribe"]["recoverable"] is True

            presence = api.presence(PresenceRequest(channel=channel)).presence
            assert {cid: (ci.user, ci.client) for cid, ci in presence.items()} == {
                client_id: ("42", client_id)
            }
            stats = api.presence_stats(PresenceStatsRequest(channel=channel))
            assert (stats.num_clients, stats.num_users) == (1, 1)
            channels = api.channels(ChannelsRequest(pattern=channel)).channels
            assert {name: c.num_clients for name, c in channels.items()} == {channel: 1}

            api.subscribe(SubscribeRequest(user="42", channel=other))
            push = json.loads(await asyncio.wait_for(ws.recv(), scaled(5.0)))
            assert push["push"]["channel"] == other and "subscribe" in push["push"]
            api.unsubscribe(UnsubscribeRequest(user="42", channel=channel))
            push = json.loads(await asyncio.wait_for(ws.recv(), scaled(5.0)))
            assert push == {
                "push": {"channel": channel, "unsubscribe": {"code": 2000, "reason": "server unsubscribe"}}
            }
            api.refresh(RefreshRequest(user="42", client=client_id))
            api.disconnect(DisconnectRequest(user="42"))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), scaled(5.0))
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (3503, "force disconnect")
    finally:
        api.close()


def test_cent_errors(cent: Client, gateway: GatewayProcess):
    with pytest.raises(CentApiResponseError) as exc:
        cent.publish(PublishRequest(channel="undefined:channel", data={}))
    assert (exc.value.code, exc.value.message) == (102, "unknown channel")
    with pytest.raises(CentApiResponseError) as exc:
        cent.presence(PresenceRequest(channel="feed:x"))  # presence off in this namespace
    assert exc.value.code == 108
    wrong = Client(gateway.api_url, "wrong-key", timeout=scaled(5.0))
    try:
        with pytest.raises(CentUnauthorizedError):
            wrong.publish(PublishRequest(channel="x", data={}))
    finally:
        wrong.close()
    assert gateway.api_key not in gateway.log_text()
