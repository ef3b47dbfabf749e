"""A client's writes to a map channel: ``publish`` with ``type`` 1 (centrifuge-js
``MapSubscription.publish(key, data)``, and ``remove(key)``: ``removed``). The authorizer decides
(``Authorizer.map_write``): the namespace's map publish / remove proxy when enabled (the backend
may refuse with its error or disconnect, or allow with another key, data and write options),
else the namespace's ``map.allow_publish_for_*`` / ``map.allow_remove_for_*`` with the key
``map.client_key`` names. Refusals: a namespace that is not a ``map`` 107, no permission 103 (an
anonymous client under ``client_key: user_id`` too), an empty key 107, no map engine 108, a proxy
that fails 100. Nothing is written unless allowed. The write carries the connection's client
info (with the channel info when subscribed).
"""

from __future__ import annotations

from typing import Protocol

from gateway.config.schema import ChannelOptions
from gateway.connection.authorization import Authorizer, Caller
from gateway.errors import CommandError
from gateway.maps.options import resolve
from gateway.maps.state import MapChange
from gateway.node import Node
from gateway.protocol import codes, policy
from gateway.protocol.messages import ClientInfo, EmptyResult, PublishRequest
from gateway.protocol.subscription import Subscription

__all__ = ["Writer", "write"]


class Writer(Protocol):
    """What a map write needs of the connection that sent it (gateway/connection/client.py)."""

    authorizer: Authorizer

    def who(self) -> policy.Who: ...

    def caller(self) -> Caller: ...

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...

    def subscription(self, channel: str) -> Subscription | None: ...


async def write(conn: Writer, node: Node, req: PublishRequest, opts: ChannelOptions) -> EmptyResult:
    """A client map write (``req.type`` 1).

    Raises:
        CommandError: refused (module docstring).
        DisconnectError: the map proxy answered a disconnect.
    """
    if opts.subscription_type != "map":
        raise CommandError(codes.ERROR_BAD_REQUEST)
    maps = node.maps
    if maps is None:
        raise CommandError(codes.ERROR_NOT_AVAILABLE)
    sub = conn.subscription(req.channel)
    grant = await conn.authorizer.map_write(conn.caller(), req, opts, subscribed=sub is not None)
    if not grant.key:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    mopts = resolve(opts.map)
    if req.removed:
        result = await maps.remove(req.channel, grant.key, mopts, idempotency_key=grant.idempotency_key)
    else:
        change = MapChange(
            grant.key,
            req.data if grant.data is None else grant.data,
            tags=grant.tags,
            info=conn.client_info(sub),
            time=int(node.clock() * 1000),
            delta=grant.delta,
            version=grant.version,
            version_epoch=grant.version_epoch,
            key_mode=grant.key_mode,
            idempotency_key=grant.idempotency_key,
        )
        result = await maps.publish(req.channel, change, mopts)
    node.metrics.map_write(req.channel, remove=req.removed, reason=result.reason)
    return EmptyResult()
