"""A client's writes to a map channel: ``publish`` with ``type`` 1 (centrifuge-js
``MapSubscription.publish(key, data)``, and ``remove(key)``: ``removed``), allowed by the
namespace's ``map.allow_publish_for_*`` / ``map.allow_remove_for_*`` (gateway/maps/permissions.py),
to the key ``map.client_key`` names. Refusals: a namespace that is not a ``map`` 107, no
permission 103 (an anonymous client under ``client_key: user_id`` too), an empty key 107, no map
engine 108. The write carries the connection's client info (with the channel info when
subscribed).
"""

from __future__ import annotations

from typing import Protocol

from gateway.config.schema import ChannelOptions
from gateway.errors import CommandError
from gateway.maps.options import resolve
from gateway.maps.permissions import may_write, write_key
from gateway.maps.state import MapChange
from gateway.node import Node
from gateway.protocol import codes, policy
from gateway.protocol.messages import ClientInfo, EmptyResult, PublishRequest
from gateway.protocol.subscription import Subscription

__all__ = ["Writer", "write"]


class Writer(Protocol):
    """What a map write needs of the connection that sent it (gateway/connection/client.py)."""

    def who(self) -> policy.Who: ...

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...

    def subscription(self, channel: str) -> Subscription | None: ...


async def write(conn: Writer, node: Node, req: PublishRequest, opts: ChannelOptions) -> EmptyResult:
    """A client map write (``req.type`` 1).

    Raises:
        CommandError: refused (module docstring).
    """
    if opts.subscription_type != "map":
        raise CommandError(codes.ERROR_BAD_REQUEST)
    maps = node.maps
    if maps is None:
        raise CommandError(codes.ERROR_NOT_AVAILABLE)
    who, sub = conn.who(), conn.subscription(req.channel)
    m = opts.map
    if not may_write(m, user=who.user, subscribed=sub is not None, insecure=who.insecure, remove=req.removed):
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    key = write_key(m, key=req.key, client_id=who.client, user=who.user)
    if key is None:
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    if not key:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    mopts = resolve(m)
    if req.removed:
        result = await maps.remove(req.channel, key, mopts)
    else:
        info = conn.client_info(sub)
        change = MapChange(key, req.data, info=info, time=int(node.clock() * 1000), delta=opts.delta_publish)
        result = await maps.publish(req.channel, change, mopts)
    node.metrics.map_write(req.channel, remove=req.removed, reason=result.reason)
    return EmptyResult()
