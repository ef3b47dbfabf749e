"""The client commands on a channel that hold no subscription state: ``publish``, ``history``,
``presence`` and ``presence_stats`` (PROTOCOL.md §4).

The seam: each is one request answered from the ``Node`` after a permission decision (the pure
``policy``, or the authorizer for publish); being subscribed is only an input to that decision.
gateway/connection/client.py dispatches them and translates the raised errors to the wire; the subscription
lifecycle is gateway/connection/subscriptions.py's. The connection is reached through ``Requester`` only.

Every function raises ``CommandError`` for a refusal (an empty channel is 107, an unknown
namespace 102) and lets ``EngineError`` through (the driver answers 100).
"""

from __future__ import annotations

from typing import Protocol

from gateway.config.schema import ChannelOptions, Settings
from gateway.connection import map_writes
from gateway.connection.authorization import Authorizer, Caller
from gateway.connection.subscriptions import channel_rules
from gateway.errors import CommandError
from gateway.node import Node
from gateway.protocol import codes, policy
from gateway.protocol.messages import (
    ChannelRequest,
    ClientInfo,
    EmptyResult,
    HistoryPage,
    HistoryRequest,
    PresenceResult,
    PresenceStatsResult,
    PublishRequest,
)
from gateway.protocol.subscription import Subscription

__all__ = ["Requester", "history", "options", "presence", "publish"]


class Requester(Protocol):
    """What these commands need of the connection that sent them (gateway/connection/client.py)."""

    authorizer: Authorizer

    def who(self) -> policy.Who: ...

    def caller(self) -> Caller: ...

    def client_info(self, sub: Subscription | None = None) -> ClientInfo: ...

    def subscription(self, channel: str) -> Subscription | None: ...


def options(settings: Settings, channel: str) -> ChannelOptions:
    """The options of a channel named by a command.

    Raises:
        CommandError: an empty channel (107) or its channel error (unknown namespace 102).
    """
    if not channel:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    return channel_rules(settings, channel).options


async def publish(conn: Requester, node: Node, req: PublishRequest) -> EmptyResult:
    """``publish``: the authorizer decides (and may replace the data); the publication carries
    the connection's info (with the channel info when subscribed)."""
    opts = options(node.settings, req.channel)
    if req.type == 1:  # a map write (gateway/connection/map_writes.py)
        return await map_writes.write(conn, node, req, opts)
    if opts.subscription_type != "stream":  # maps take map writes (type 1)
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    sub = conn.subscription(req.channel)
    grant = await conn.authorizer.publish(conn.caller(), req, opts, subscribed=sub is not None)
    data = grant.data if grant.data is not None else req.data
    await node.publish(req.channel, opts, data, info=conn.client_info(sub), skip_history=grant.skip_history)
    return EmptyResult()


async def history(conn: Requester, node: Node, req: HistoryRequest) -> HistoryPage:
    """``history``: a page from ``since`` (another epoch than the stream's ⇒ 112)."""
    settings = node.settings
    opts = options(settings, req.channel)
    limit = policy.history_request(
        opts,
        conn.who(),
        subscribed=conn.subscription(req.channel) is not None,
        limit=req.limit,
        reverse=req.reverse,
        since_offset=req.since.offset if req.since is not None else None,
        cap=settings.client.history_max_publication_limit,
    )
    if isinstance(limit, codes.Error):
        raise CommandError(limit)
    result = await node.history(req.channel, opts, since=req.since, limit=limit, reverse=req.reverse)
    if req.since is not None and req.since.epoch and req.since.epoch != result.position.epoch:
        raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION)
    return HistoryPage(result.publications, result.position.epoch, result.position.offset)


async def presence(
    conn: Requester, node: Node, req: ChannelRequest, *, stats: bool
) -> PresenceResult | PresenceStatsResult:
    """``presence`` (or, with ``stats``, ``presence_stats``) of a channel."""
    opts = options(node.settings, req.channel)
    error = policy.presence_request(opts, conn.who(), subscribed=conn.subscription(req.channel) is not None)
    if error is not None:
        raise CommandError(error)
    if stats:
        st = await node.presence.stats(req.channel)
        return PresenceStatsResult(st.num_clients, st.num_users)
    return PresenceResult(await node.presence.presence(req.channel))
