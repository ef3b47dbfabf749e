"""Channel commands that need no subscription state machine: publish, history, presence,
presence_stats and rpc (PROTOCOL.md §1.5, permission rules of §7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.channels import ChannelRules, resolve
from gateway.errors import CommandError
from gateway.protocol import codec, codes
from gateway.protocol.messages import (
    ChannelRequest,
    HistoryRequest,
    Publication,
    PublishRequest,
    RPCRequest,
    StreamPosition,
)

if TYPE_CHECKING:
    from gateway.client import Client


def channel_rules(client: Client, channel: str) -> ChannelRules:
    if not channel:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    rules = resolve(client.settings, channel)
    if isinstance(rules, codes.Error):
        raise CommandError(rules)
    return rules


async def publish(client: Client, req: PublishRequest) -> dict[str, Any]:
    opts = channel_rules(client, req.channel).options
    anonymous_ok = bool(client.user) or opts.allow_publish_for_anonymous
    allowed = (
        (opts.allow_publish_for_client and anonymous_ok)
        or (
            opts.allow_publish_for_subscriber and req.channel in client.session.subscriptions and anonymous_ok
        )
        or client.settings.client.insecure
    )
    if not allowed:
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    sub = client.session.subscriptions.get(req.channel)
    await client.node.publish(req.channel, opts, req.data, info=client.client_info(sub))
    return {}


def allowed(
    client: Client, channel: str, for_client: bool, for_subscriber: bool, for_anonymous: bool
) -> bool:
    if client.settings.client.insecure:
        return True
    if not client.user and not for_anonymous:
        return False
    return for_client or (for_subscriber and channel in client.session.subscriptions)


async def history(client: Client, req: HistoryRequest) -> dict[str, Any]:
    opts = channel_rules(client, req.channel).options
    if not (opts.history_size > 0 and opts.history_ttl > 0):
        raise CommandError(codes.ERROR_NOT_AVAILABLE)
    if not allowed(
        client,
        req.channel,
        opts.allow_history_for_client,
        opts.allow_history_for_subscriber,
        opts.allow_history_for_anonymous,
    ):
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    if req.reverse and req.since is not None and req.since.offset == 0:
        raise CommandError(codes.ERROR_BAD_REQUEST)
    cap = client.settings.client.history_max_publication_limit
    limit = req.limit
    if limit < 0 or (cap and limit > cap):
        limit = cap if cap else -1
    result = await client.node.history(req.channel, opts, since=req.since, limit=limit, reverse=req.reverse)
    if req.since is not None and req.since.epoch and req.since.epoch != result.position.epoch:
        raise CommandError(codes.ERROR_UNRECOVERABLE_POSITION)
    return history_result(result.publications, result.position)


async def presence(client: Client, req: ChannelRequest, *, stats: bool) -> dict[str, Any]:
    opts = channel_rules(client, req.channel).options
    if not opts.presence:
        raise CommandError(codes.ERROR_NOT_AVAILABLE)
    if not allowed(
        client,
        req.channel,
        opts.allow_presence_for_client,
        opts.allow_presence_for_subscriber,
        opts.allow_presence_for_anonymous,
    ):
        raise CommandError(codes.ERROR_PERMISSION_DENIED)
    if stats:
        st = await client.node.presence.stats(req.channel)
        return {"num_clients": st.num_clients, "num_users": st.num_users}
    entries = await client.node.presence.presence(req.channel)
    return {"presence": {cid: codec.client_info_obj(info) for cid, info in entries.items()}}


def rpc(client: Client, req: RPCRequest) -> dict[str, Any]:
    ping = client.settings.rpc.ping
    if not ping.enabled:
        raise CommandError(codes.ERROR_NOT_AVAILABLE)
    if req.method != ping.method:
        raise CommandError(codes.ERROR_METHOD_NOT_FOUND)
    return {}


def history_result(pubs: list[Publication], position: StreamPosition) -> dict[str, Any]:
    """A history result: publications, epoch and offset are always written (§1.1)."""
    return {
        "publications": [codec.publication_obj(p.data, p.offset, p.info, p.tags) for p in pubs],
        "epoch": position.epoch,
        "offset": position.offset,
    }
