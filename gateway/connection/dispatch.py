"""Which part of a connection answers each client command (PROTOCOL.md §2–§5).

The seam: the driver (gateway/connection/client.py) runs one command at a time and translates
its outcome to the wire; ``route`` only picks who answers it: the driver itself (``connect``,
``refresh``), the shared-poll subscriptions (subscribe type 4 and their sub_refresh), the map
subscriptions (subscribe types 1–3), the channel subscriptions (subscribe, unsubscribe,
sub_refresh), a bidirectional backend stream or the channel commands (publish), the channel
commands (history, presence, presence_stats) and the authorizer (rpc). A new command, or a new
kind of subscription taking over one, changes this table and nothing of the driver. The
connection is reached through ``Commands`` only; imports no transport and not
gateway/connection/client.py.
"""

from __future__ import annotations

from typing import Protocol

from gateway.connection import channel_commands
from gateway.connection.map_subscribe import MapSubscriptions
from gateway.connection.proxy_streams import StreamSubscriptions
from gateway.connection.shared_poll import SharedPollSubscriptions
from gateway.connection.subscriptions import Subscriptions
from gateway.errors import CommandError, DisconnectError
from gateway.node import Node
from gateway.protocol import codes
from gateway.protocol.messages import (
    ChannelRequest,
    Command,
    ConnectRequest,
    EmptyResult,
    HistoryRequest,
    Method,
    PublishRequest,
    RefreshRequest,
    RefreshResult,
    Result,
    RPCRequest,
    SubRefreshRequest,
    SubscribeRequest,
    UnsubscribeRequest,
)

__all__ = ["Commands", "route"]


class Commands(channel_commands.Requester, Protocol):
    """What the routing needs of a connection: the parts that answer commands, and the two
    commands the driver answers itself."""

    @property
    def node(self) -> Node: ...

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def maps(self) -> MapSubscriptions: ...

    @property
    def shared_poll(self) -> SharedPollSubscriptions: ...

    @property
    def streams(self) -> StreamSubscriptions: ...

    async def handle_connect(self, req: ConnectRequest) -> Result: ...

    async def handle_refresh(self, req: RefreshRequest) -> RefreshResult: ...


async def route(conn: Commands, cmd: Command) -> Result:
    """Answer ``cmd`` by the part that owns it.

    Raises:
        CommandError: the command was refused (the error reply); the v1 ``ping`` command is
            not available (108).
        DisconnectError: the command ends the connection (``send`` is not available: 3508).
        EngineError: the engine failed (the driver answers 100).
    """
    req = cmd.request
    if isinstance(req, ConnectRequest):
        return await conn.handle_connect(req)
    if conn.shared_poll.handles(req):
        return await conn.shared_poll.handle(req)
    if isinstance(req, SubscribeRequest):  # types 1-3: maps (gateway/connection/map_subscribe.py)
        return await (conn.maps if 1 <= req.type <= 3 else conn.subscriptions).subscribe(req)
    if isinstance(req, UnsubscribeRequest):
        await conn.subscriptions.unsubscribe(req.channel)
        return EmptyResult()
    if isinstance(req, PublishRequest):
        if await conn.streams.publish(req):  # into a bidirectional subscribe stream
            return EmptyResult()
        return await channel_commands.publish(conn, conn.node, req)
    if isinstance(req, HistoryRequest):
        return await channel_commands.history(conn, conn.node, req)
    if isinstance(req, ChannelRequest):
        return await channel_commands.presence(
            conn, conn.node, req, stats=cmd.method is Method.PRESENCE_STATS
        )
    if isinstance(req, RefreshRequest):
        return await conn.handle_refresh(req)
    if isinstance(req, SubRefreshRequest):
        return await conn.subscriptions.sub_refresh(req)
    if isinstance(req, RPCRequest):
        return await conn.authorizer.rpc(conn.caller(), req)
    if cmd.method is Method.SEND:
        raise DisconnectError(codes.DISCONNECT_NOT_AVAILABLE)
    raise CommandError(codes.ERROR_NOT_AVAILABLE)  # the v1 `ping` command
