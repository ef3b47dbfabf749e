"""The user's personal channel (``client.subscribe_to_user_personal_channel``), as Centrifugo
does it: every connection with a user is subscribed server-side, at connect, to
``<personal_channel_namespace><namespace_boundary><user_boundary><user>`` (``#42``, or
``personal:#42`` with a namespace), so a publication there reaches all of the user's
connections. With ``single_connection``, a new connection evicts the user's other connections
(disconnect 3504 "connection limit", on every node) when the personal channel's presence shows
any; without presence on that namespace it evicts them unconditionally.

Imports only the config, the cluster's request types and the engine seam.
"""

from __future__ import annotations

import logging

from gateway.api.requests import DisconnectReason, DisconnectRequest
from gateway.config.schema import Settings
from gateway.engine.base import EngineError
from gateway.node import Node
from gateway.protocol import codes

log = logging.getLogger("taskcast.gateway.personal")


def personal_channel(settings: Settings, user: str) -> str:
    """The personal channel of ``user``; "" when the option is off or the user is anonymous."""
    cfg = settings.client.subscribe_to_user_personal_channel
    if not cfg.enabled or not user:
        return ""
    channel = settings.channel.user_boundary + user
    if cfg.personal_channel_namespace:
        channel = cfg.personal_channel_namespace + settings.channel.namespace_boundary + channel
    return channel


async def evict_other_connections(node: Node, channel: str, user: str, client_id: str) -> None:
    """``single_connection``: disconnect the user's other connections (any node) before this
    one subscribes. A failing engine is logged, and the connect goes on (Centrifugo's choice)."""
    opts = node.settings.channel_options(channel)
    try:
        if opts is not None and opts.presence:
            entries = await node.presence.presence(channel)
            if not any(cid != client_id for cid in entries):
                return
        disconnect = codes.DISCONNECT_CONNECTION_LIMIT
        await node.cluster.user_op(
            DisconnectRequest(
                user=user,
                whitelist=[client_id],
                disconnect=DisconnectReason(disconnect.code, disconnect.reason),
            )
        )
    except EngineError as exc:
        log.warning("single connection: could not evict the other connections of user %r: %s", user, exc)
