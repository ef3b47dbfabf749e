"""Issue 28, defect 2 in-process: any exception on a client's connect, subscribe or follow-up
job answers the client (a 3004 close it reconnects after) and never leaves the connection counted
half-open; the ttl written into a reply always fits its ``uint32`` field, whatever the expiry."""

from __future__ import annotations

from gateway.protocol import codes, policy
from gateway.protocol.codec import JsonCodec
from gateway.protocol.messages import Method, Result
from gateway.protocol.protobuf.codec import PROTOBUF
from tests.gateway.recording import Harness, until


class FailingReplies(JsonCodec):
    """A codec that cannot encode the success reply of one method (as Protobuf could not encode
    a ttl past uint32): the exception escapes after the command's work is done."""

    def __init__(self, method: Method) -> None:
        self.method = method

    def encode_reply(self, cmd_id: int, method: Method, result: Result) -> bytes:
        if method is self.method:
            raise ValueError("Value out of range")
        return super().encode_reply(cmd_id, method, result)


async def test_an_unencodable_connect_reply_closes_and_releases_the_connection() -> None:
    h = Harness()
    client, transport = h.connect()
    client.session.codec = FailingReplies(Method.CONNECT)
    client.feed(b'{"id":1,"connect":{}}')
    await until(lambda: transport.closed is not None)
    assert transport.closed == codes.DISCONNECT_SERVER_ERROR
    assert client.client_id not in h.node.hub.clients and not h.node.hub.users
    assert client not in h.node.connecting


async def test_an_unencodable_subscribe_reply_closes_and_leaves_no_subscriber() -> None:
    h = Harness()
    client, transport = await h.connected()
    client.session.codec = FailingReplies(Method.SUBSCRIBE)
    client.feed(b'{"id":2,"subscribe":{"channel":"news"}}')
    await until(lambda: transport.closed is not None)
    assert transport.closed == codes.DISCONNECT_SERVER_ERROR
    assert not h.node.hub.clients
    await until(lambda: "news" not in h.node.hub.channels)  # released (asynchronously)


async def test_the_ttl_of_the_latest_accepted_expiry_fits_uint32() -> None:
    assert policy.expiry_ttl(policy.MAX_EXPIRE_AT, 0) == policy.MAX_TTL
    h = Harness()
    client, _ = h.connect()
    client.session.set_expiry(float(policy.MAX_EXPIRE_AT))
    result = client.session.connect_result(client="c", version="v", now=0.0, subs={})
    assert result.ttl == policy.MAX_TTL
    PROTOBUF.encode_reply(1, Method.CONNECT, result)  # encodes: no "Value out of range"
