"""The presence of one connection in its channels: the engine's presence (namespace
``presence``), the key a client wrote into a map under ``map.remove_client_on_unsubscribe``
(removed when its subscription ends), and map presence (``map_clients_presence_channel_prefix``,
``map_users_presence_channel_prefix``: Centrifugo v6.9).

Map presence: a subscription to a channel ``ch`` of a namespace with a prefix writes an entry
into the map channel ``<prefix>ch`` (a ``map_clients`` / ``map_users`` namespace), which
clients watch with a map subscription of that type: the clients map holds one key per
connection (its client ID, with its ``ClientInfo``), removed when the subscription ends; the
users map one key per user (no info), left to expire by the map's ``key_ttl`` so a quick
reconnect does not flicker. Entries are written with ``if_new`` and refreshed (TTL only, no
stream entry) every ``client.presence_update_interval``, as centrifuge does. A map presence
write that fails is logged and skipped: it never fails the subscription (the TTL repairs it).
"""

from __future__ import annotations

import logging
from typing import Protocol

from gateway.engine.base import EngineError
from gateway.maps.options import resolve
from gateway.maps.state import MapChange
from gateway.node import Node
from gateway.protocol.messages import ClientInfo
from gateway.protocol.subscription import Subscription

log = logging.getLogger("taskcast.gateway.client")

__all__ = ["ChannelPresence", "Member"]


class Member(Protocol):
    """The connection, as its presence sees it."""

    client_id: str
    user: str

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...


class ChannelPresence:
    """Adds, refreshes and removes one connection's presence entries of a subscription."""

    __slots__ = ("_member", "_node")

    def __init__(self, member: Member, node: Node) -> None:
        self._member = member
        self._node = node

    async def join(self, sub: Subscription) -> None:
        """``sub`` is established: its presence entries are added.

        Raises:
            EngineError: the engine's presence failed (map presence failures are only logged).
        """
        member = self._member
        if sub.presence:
            await self._node.presence.add(sub.channel, member.client_id, member.client_info(sub))
        await self._map_presence(sub)

    def kept(self, sub: Subscription) -> bool:
        """Whether ``sub`` has presence entries to refresh."""
        if sub.presence:
            return True
        opts = self._node.settings.channel_options(sub.channel)
        return opts is not None and bool(
            opts.map_clients_presence_channel_prefix or opts.map_users_presence_channel_prefix
        )

    async def refresh(self, sub: Subscription) -> None:
        """The periodic refresh of a live subscription's entries."""
        await self.join(sub)

    async def leave(self, sub: Subscription) -> None:
        """``sub`` ended: its presence entries are removed (a users map entry expires). Each
        removal runs whatever the others did; failures are logged (``node.cleanup``), never
        raised."""
        member, node = self._member, self._node
        cleanup = node.cleanup
        if sub.presence:
            await cleanup.step("presence removal", node.presence.remove(sub.channel, member.client_id))
        opts = node.settings.channel_options(sub.channel)
        if opts is None or node.maps is None:
            return
        if opts.is_map and opts.map.remove_client_on_unsubscribe:  # the key the client wrote
            removal = node.maps.remove(sub.channel, member.client_id, resolve(opts.map))
            await cleanup.step("map key removal", removal)
        if not opts.map_clients_presence_channel_prefix:
            return
        target = opts.map_clients_presence_channel_prefix + sub.channel
        target_opts = node.settings.channel_options(target)
        if target_opts is None:
            return
        await cleanup.step(
            "map presence removal", node.maps.remove(target, member.client_id, resolve(target_opts.map))
        )

    async def _map_presence(self, sub: Subscription) -> None:
        member, node = self._member, self._node
        opts = node.settings.channel_options(sub.channel)
        if opts is None or node.maps is None:
            return
        writes: list[tuple[str, str, ClientInfo | None]] = []
        if opts.map_clients_presence_channel_prefix:
            target = opts.map_clients_presence_channel_prefix + sub.channel
            writes.append((target, member.client_id, member.client_info(sub)))
        if opts.map_users_presence_channel_prefix and member.user:
            writes.append((opts.map_users_presence_channel_prefix + sub.channel, member.user, None))
        for target, key, info in writes:
            target_opts = node.settings.channel_options(target)
            if target_opts is None:
                continue
            change = MapChange(
                key=key,
                data=b"",
                info=info,
                time=int(node.clock() * 1000),
                key_mode="if_new",
                refresh_ttl_on_suppress=True,
            )
            try:
                await node.maps.publish(target, change, resolve(target_opts.map))
            except EngineError as exc:
                log.debug("map presence of %s in %s not written: %s", key, target, exc)
