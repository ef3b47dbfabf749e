"""``client.subscribe_to_user_personal_channel`` with centrifuge-python against a real gateway
process (memory and Redis engines): a connection with a user is subscribed server-side to its
personal channel, a server API publication to ``personal:#42`` reaches user 42, and with
``single_connection`` a new connection of the user evicts the older one (3504)."""

from __future__ import annotations

import copy

from cent import AsyncClient, PublishRequest

from tests.conformance.conftest import SECRET, GatewayFactory, Wire, standard_config
from tests.conformance.test_python_sdk import WAIT_SECONDS, Harness
from tests.support import mint_token


def personal_config(*, single_connection: bool, join_leave: bool = False) -> dict[str, object]:
    config = copy.deepcopy(standard_config())
    client = config["client"]
    assert isinstance(client, dict)
    client["subscribe_to_user_personal_channel"] = {
        "enabled": True,
        "personal_channel_namespace": "personal",
        "single_connection": single_connection,
    }
    channel = config["channel"]
    assert isinstance(channel, dict)
    personal: dict[str, object] = {"name": "personal", "presence": True}
    if join_leave:
        personal.update(join_leave=True, force_push_join_leave=True)
    channel["namespaces"].append(personal)
    return config


async def test_py_personal_channel_receives_publications_to_the_user(
    gateway_factory: GatewayFactory, py_wire: Wire
):
    gw = gateway_factory(personal_config(single_connection=False))
    h = Harness(gw, py_wire)
    try:
        c = h.client(mint_token(SECRET, "42"))
        await c.connect()
        await c.ready(WAIT_SECONDS)
        await h.rec.wait_for("server_subscribed", "personal:#42")
        async with AsyncClient(gw.api_url, gw.api_key) as api:
            await api.publish(PublishRequest(channel="personal:#42", data={"note": "for 42"}))
        (pub,) = await h.rec.wait_for("server_publication", "personal:#42")
        assert h.decode(pub.ctx.pub.data) == {"note": "for 42"}
        # An anonymous connection has no personal channel.
        anon = Harness(gw, py_wire)
        try:
            a = anon.client(mint_token(SECRET, ""))
            await a.connect()
            await a.ready(WAIT_SECONDS)
            assert not anon.rec.of("server_subscribed")
        finally:
            await anon.close()
    finally:
        await h.close()


async def test_py_personal_channel_sends_the_join_push_after_connect(
    gateway_factory: GatewayFactory, py_wire: Wire
):
    """With join_leave and force_push_join_leave on the personal namespace, the connection gets
    its own join push on its personal channel after the connect reply, as from Centrifugo."""
    gw = gateway_factory(personal_config(single_connection=False, join_leave=True))
    h = Harness(gw, py_wire)
    try:
        c = h.client(mint_token(SECRET, "42"))
        await c.connect()
        await c.ready(WAIT_SECONDS)
        (join,) = await h.rec.wait_for("server_join", "personal:#42")
        assert join.ctx.info.user == "42"
        names = [e.name for e in h.rec.events]
        assert names.index("connected") < names.index("server_join")
    finally:
        await h.close()


async def test_py_single_connection_evicts_the_older_connection(
    gateway_factory: GatewayFactory, py_wire: Wire
):
    gw = gateway_factory(personal_config(single_connection=True))
    first, second = Harness(gw, py_wire), Harness(gw, py_wire)
    try:
        a = first.client(mint_token(SECRET, "42"))
        await a.connect()
        await a.ready(WAIT_SECONDS)
        await first.rec.wait_for("server_subscribed", "personal:#42")
        b = second.client(mint_token(SECRET, "42"))
        await b.connect()
        await b.ready(WAIT_SECONDS)
        (gone,) = await first.rec.wait_for("disconnected")
        assert gone.ctx.code == 3504
        await second.rec.wait_for("server_subscribed", "personal:#42")
        assert not second.rec.of("disconnected")
    finally:
        await first.close()
        await second.close()
